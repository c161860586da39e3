"""Keys an earlier release read: a file that still sets one is refused with what replaced
it, naming the file and the key (REMOVED_KEYS in slurm_ext/core/config.py), in the
service's and the agent's configs and in the simulator's policy file alike; tuning
constants are read from `[x.tuning]` and refused elsewhere; the simulator-only keys of
Slurm's own priority are read only from the simulator's policy file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.config import AgentConfig
from slurm_ext.core import tomlio
from slurm_ext.core.config import REMOVED_KEYS, ConfigError, load_config, to_table
from slurm_ext.core.fields import SIMULATOR, TUNING, place
from slurm_ext.policy import PolicyConfig
from slurm_ext.service.loop import ServiceConfig

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "etc" / "traces" / "tiresias-60job.csv"


def _refused(cls: type, path: Path, text: str, simulator: bool = False) -> str:
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(cls, path, simulator=simulator)
    assert str(path) in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("key", sorted(REMOVED_KEYS["PolicyConfig"]))
def test_a_removed_policy_key_is_refused_with_what_replaced_it(key, tmp_path):
    value = '"x"' if key != "gittins_censored" else "true"
    why = REMOVED_KEYS["PolicyConfig"][key]
    msg = _refused(ServiceConfig, tmp_path / "service.toml", f"[policy]\n{key} = {value}\n")
    assert f"policy.{key}: {why}" in msg
    assert why.startswith("removed") and "delete the line" in why
    # in [policy.tuning] too, and in the simulator's policy file
    msg = _refused(ServiceConfig, tmp_path / "t.toml", f"[policy.tuning]\n{key} = {value}\n")
    assert f"policy.tuning.{key}: {why}" in msg
    msg = _refused(PolicyConfig, tmp_path / "policy.toml", f"{key} = {value}\n", simulator=True)
    assert f"policy.toml: {key}: {why}" in msg


def test_a_tuning_constant_is_read_from_policy_tuning_and_refused_in_policy(tmp_path):
    path = tmp_path / "service.toml"
    path.write_text("[policy]\nmin_run_s = 60.0\n[policy.tuning]\nqueue_gpu_exponent = 0.5\n")
    cfg = load_config(ServiceConfig, path)
    assert (cfg.policy.min_run_s, cfg.policy.queue_gpu_exponent) == (60.0, 0.5)
    msg = _refused(ServiceConfig, path, "[policy]\nqueue_gpu_exponent = 0.5\n")
    assert "policy.queue_gpu_exponent: moved to the [policy.tuning] table" in msg
    # an admin's key is not a tuning constant
    msg = _refused(ServiceConfig, path, "[policy.tuning]\nmin_run_s = 60.0\n")
    assert "policy.tuning.min_run_s: belongs in [policy]" in msg
    msg = _refused(ServiceConfig, path, "[policy.tuning]\nnew_knob = 1\n")
    assert "policy.tuning.new_knob: unknown key" in msg and "queue_gpu_exponent" in msg
    msg = _refused(ServiceConfig, path, '[policy]\ntuning = "x"\n')
    assert "policy.tuning: expected a table" in msg


def test_every_policy_field_has_one_place_and_the_shipped_file_lists_no_tuning_constant():
    shipped = (REPO / "etc" / "service.toml").read_text()
    for f in PolicyConfig.__dataclass_fields__.values():
        if place(f) in (TUNING, SIMULATOR) or f.name in REMOVED_KEYS["PolicyConfig"]:
            assert f"\n{f.name} = " not in shipped, f.name
    cfg = load_config(ServiceConfig, REPO / "etc" / "service.toml")
    assert cfg.policy == PolicyConfig()  # the shipped defaults


def test_simulator_only_keys_are_refused_in_the_service_and_read_by_the_simulator(tmp_path):
    msg = _refused(ServiceConfig, tmp_path / "service.toml", "[policy]\nfairshare_weight = 1.0\n")
    assert "policy.fairshare_weight: simulator-only" in msg and "simulate" in msg
    path = tmp_path / "policy.toml"
    path.write_text("fairshare_weight = 1.0\n[tuning]\nqueue_gpu_exponent = 0.0\n")
    cfg = load_config(PolicyConfig, path, simulator=True)
    assert (cfg.fairshare_weight, cfg.queue_gpu_exponent) == (1.0, 0.0)
    msg = _refused(PolicyConfig, path, "queue_gpu_exponent = 0.0\n", simulator=True)
    assert "queue_gpu_exponent: moved to the [tuning] table" in msg


def test_the_written_table_loads_back_to_the_same_config(tmp_path):
    cfg = PolicyConfig(min_run_s=60.0, queue_gpu_exponent=0.5, fairshare_weight=5.0)
    for simulator in (False, True):
        path = tmp_path / f"policy-{simulator}.toml"
        path.write_text(tomlio.dumps(to_table(cfg, simulator)))
        got = load_config(PolicyConfig, path, simulator=simulator)
        assert got.queue_gpu_exponent == 0.5 and got.min_run_s == 60.0
        assert got.fairshare_weight == (5.0 if simulator else PolicyConfig().fairshare_weight)


@pytest.mark.parametrize(
    ("cls", "text", "key"),
    [
        (ServiceConfig, '[opportunistic]\nopportunistic_qos = ["x"]\n', "opportunistic.opportunistic_qos"),
        (ServiceConfig, "[opportunistic]\nguaranteed_partitions = []\n", "opportunistic.guaranteed_partitions"),
        (AgentConfig, "[colocation]\nguaranteed_qos = []\n", "colocation.guaranteed_qos"),
        (AgentConfig, '[colocation]\ndefault_class = "guaranteed"\n', "colocation.default_class"),
    ],
)  # fmt: skip
def test_the_class_lists_moved_to_the_classes_file(cls, text, key, tmp_path):
    msg = _refused(cls, tmp_path / "daemon.toml", text)
    assert f"{key}: moved to the classes file" in msg and "classes_file" in msg


def test_the_agents_colocation_constants_moved_to_colocation_tuning(tmp_path):
    path = tmp_path / "agent.toml"
    msg = _refused(AgentConfig, path, "[colocation]\nmemory_high = 0.5\n")
    assert "colocation.memory_high: moved to the [colocation.tuning] table" in msg
    path.write_text("[colocation]\nslow_fraction = 0.5\n[colocation.tuning]\nmemory_high = 0.5\n")
    cfg = load_config(AgentConfig, path)
    assert (cfg.colocation.slow_fraction, cfg.colocation.memory_high) == (0.5, 0.5)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=120
    )


def test_the_daemons_and_simulate_exit_naming_the_file_and_the_removed_key(tmp_path):
    service = tmp_path / "service.toml"
    service.write_text('[policy]\nwait_guard = "age"\n')
    r = _cli("slurm_ext.cli", "serve", "--once", "--config", str(service))
    assert r.returncode == 2 and f"{service}: policy.wait_guard: removed" in r.stderr
    agent = tmp_path / "agent.toml"
    agent.write_text('[colocation]\nopportunistic_qos = ["scavenger"]\n')
    r = _cli("nodeagent.cli", "run", "--once", "--config", str(agent))
    assert r.returncode == 2
    assert f"{agent}: colocation.opportunistic_qos: moved to the classes file" in r.stderr
    policy = tmp_path / "policy.toml"
    policy.write_text("gittins_censored = true\n")
    r = _cli("slurm_ext.cli", "simulate", "--trace", str(TRACE), "--config", str(policy))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"{policy}: gittins_censored: removed" in r.stderr


def test_simulate_reads_tuning_and_simulator_keys_from_its_policy_file(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "fairshare_half_life_s = 3600.0\n"  # accepted here (Slurm's model)
        "[tuning]\nqueue_thresholds_gpu_s = [60.0]\nqueue_gpu_exponent = 0.0\n"
    )
    args = ("--trace", str(TRACE), "--nodes", "1", "--gpus-per-node", "8", "--json")
    plain = _cli("slurm_ext.cli", "simulate", *args, "--policy", "las")
    tuned = _cli("slurm_ext.cli", "simulate", *args, "--policy", "las", "--config", str(policy))
    assert plain.returncode == 0 and tuned.returncode == 0, tuned.stderr
    # one queue limit at 60 GPU-s orders this trace otherwise
    assert json.loads(plain.stdout)["avg_jct_s"] != json.loads(tuned.stdout)["avg_jct_s"]
