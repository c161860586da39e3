"""benchmarks/studies/fidelity_policy.py: a kept replay is simulated with the policy its
service ran, read back from the service.toml the replay wrote (wall seconds) into trace
seconds, settings added since taking the behaviour from before they existed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.studies.fidelity_policy import BEFORE, live_policy
from slurm_ext.core import tomlio
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.service import with_checkpoints, with_requeue_hold, write_config

SPEEDUP = 1750.0  # 3,600 s / 1,750 does not divide evenly: read back 3599.9999999999995


def _written(tmp_path: Path, policy: PolicyConfig) -> Path:
    write_config(tmp_path / "service.toml", "slurm.conf", "gpu", SPEEDUP, True, policy, 1800.0)
    return tmp_path


def test_the_policy_written_is_the_policy_read_back(tmp_path):
    ran = PolicyConfig(policy="gittins", wait_guard_keep=4.0)
    got = live_policy(_written(tmp_path, ran), SPEEDUP)
    want = with_requeue_hold(with_checkpoints(ran, 1800.0), SPEEDUP)
    assert got == want  # the scaled settings come back to the trace's round values
    assert got.queue_thresholds_gpu_s[0] == 3600.0 and got.min_run_s == 1200.0


def test_settings_an_older_service_lacked_take_their_earlier_behaviour(tmp_path):
    """The oldest kept runs wrote no wait_guard_keep: their service kept no guard's
    stint."""
    d = _written(tmp_path, PolicyConfig(policy="gittins"))
    data = tomlio.loads((d / "service.toml").read_text())
    for name in BEFORE:
        del data["policy"][name]
    (d / "service.toml").write_text(tomlio.dumps(data))
    got = live_policy(d, SPEEDUP)
    assert got.wait_guard_keep == 0.0
    today = PolicyConfig()
    assert today.wait_guard_keep != 0.0
    # the rest as written
    assert dataclasses.replace(got, **{k: getattr(today, k) for k in BEFORE}).min_run_s == 1200.0


def test_no_service_no_policy_and_unknown_settings_are_named(tmp_path):
    assert live_policy(tmp_path, SPEEDUP) is None  # Slurm alone keeps no service.toml
    (tmp_path / "service.toml").write_text('[policy]\npolicy = "gittins"\nnew_knob = 1\n')
    with pytest.raises(ValueError, match="new_knob"):
        live_policy(tmp_path, SPEEDUP)
