"""benchmarks/studies/fidelity_policy.py: a kept replay is simulated with the policy its
service ran, read back from the service.toml the replay wrote (wall seconds) into trace
seconds, settings added since taking the behaviour from before they existed, settings
removed since read only where they hold today's behaviour."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.studies.fidelity_policy import BEFORE, REMOVED, live_policy
from slurm_ext.core import tomlio
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.service import with_checkpoints, with_requeue_hold, write_config

SPEEDUP = 1750.0  # 3,600 s / 1,750 does not divide evenly: read back 3599.9999999999995


def _written(tmp_path: Path, policy: PolicyConfig) -> Path:
    write_config(tmp_path / "service.toml", "slurm.conf", "gpu", SPEEDUP, True, policy, 1800.0)
    return tmp_path


def test_the_policy_written_is_the_policy_read_back(tmp_path):
    ran = PolicyConfig(policy="gittins", wait_guard_keep=4.0)
    d = _written(tmp_path, ran)
    assert "wait_guard_keep" in tomlio.loads((d / "service.toml").read_text())["policy"]["tuning"]
    got = live_policy(d, SPEEDUP)
    want = with_requeue_hold(with_checkpoints(ran, 1800.0), SPEEDUP)
    assert got == want  # the scaled settings come back to the trace's round values
    assert got.queue_thresholds_gpu_s[0] == 3600.0 and got.min_run_s == 1200.0


def test_settings_an_older_service_lacked_take_their_earlier_behaviour(tmp_path):
    """The oldest kept runs wrote no wait_guard_keep: their service kept no guard's
    stint. Their settings were all in [policy] (no [policy.tuning] then)."""
    d = _written(tmp_path, PolicyConfig(policy="gittins"))
    data = tomlio.loads((d / "service.toml").read_text())
    data["policy"] |= data["policy"].pop("tuning")  # the older, flat [policy]
    for name in BEFORE:
        del data["policy"][name]
    (d / "service.toml").write_text(tomlio.dumps(data))
    got = live_policy(d, SPEEDUP)
    assert got.wait_guard_keep == 0.0
    today = PolicyConfig()
    assert today.wait_guard_keep != 0.0
    # the rest as written
    assert dataclasses.replace(got, **{k: getattr(today, k) for k in BEFORE}).min_run_s == 1200.0
    assert got.queue_thresholds_gpu_s[0] == 3600.0


def test_removed_settings_are_read_only_at_todays_behaviour(tmp_path):
    """A run that wrote a setting since removed ran as today where it holds the value
    that is today's behaviour; any other value is a variant the policy cannot model."""
    d = _written(tmp_path, PolicyConfig(policy="gittins"))
    data = tomlio.loads((d / "service.toml").read_text())
    (d / "service.toml").write_text(tomlio.dumps({**data, "policy": data["policy"] | REMOVED}))
    (tmp_path / "b").mkdir()
    assert live_policy(d, SPEEDUP) == live_policy(_written(tmp_path / "b", PolicyConfig()), SPEEDUP)
    policy = data["policy"] | {"starvation_scope": "all"}
    (d / "service.toml").write_text(tomlio.dumps({**data, "policy": policy}))
    with pytest.raises(ValueError, match="starvation_scope"):
        live_policy(d, SPEEDUP)


def test_no_service_no_policy_and_unknown_settings_are_named(tmp_path):
    assert live_policy(tmp_path, SPEEDUP) is None  # Slurm alone keeps no service.toml
    (tmp_path / "service.toml").write_text('[policy]\npolicy = "gittins"\nnew_knob = 1\n')
    with pytest.raises(ValueError, match="new_knob"):
        live_policy(tmp_path, SPEEDUP)
