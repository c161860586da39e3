"""The slurm-ext-agent command: config errors exit 2 naming the key; run --once; show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from nodeagent.testing import _wait_exec

AGENT = [sys.executable, "-m", "nodeagent.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=60)


def test_bad_config_exits_2_naming_file_and_key(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text('interval_s = "5"\n')
    r = run("run", "--config", str(cfg), "--once")
    assert r.returncode == 2 and f"{cfg}: interval_s: expected a number" in r.stderr
    classes = tmp_path / "classes.toml"
    classes.write_text('default_class = "vip"\n')
    cfg.write_text(f'classes_file = "{classes}"\n')
    r = run("run", "--config", str(cfg), "--once")
    assert r.returncode == 2 and f"{classes}: default_class: must be one of" in r.stderr
    cfg.write_text('[colocation]\ndefault_class = "opportunistic"\n')
    r = run("run", "--config", str(cfg), "--once")
    assert (
        r.returncode == 2 and f"{cfg}: colocation.default_class: moved to the classes" in r.stderr
    )


def test_a_huge_simulated_gpu_count_is_refused_at_load(tmp_path):
    """The simulated backend builds every GPU at every read: 10 million hung `show`."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[gpu]\nbackend = "simulated"\nsimulated_count = 10000000\n')
    r = subprocess.run(
        [*AGENT, "show", "--config", str(cfg)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2
    assert f"{cfg}: gpu: simulated_count must be within 1..64 GPUs per node" in r.stderr
    cfg.write_text('[gpu]\nbackend = "simulated"\nsimulated_count = 64\n')
    r = run("show", "--config", str(cfg), "--json", "--wait", "0.1")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["gpus"]) == 64


def test_unsafe_secret_file_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("abc")
    secret.chmod(0o644)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'state_file = "{tmp_path}/s.json"\n[report]\nenabled = true\n'
        f'service_url = "http://127.0.0.1:9"\nsecret_file = "{secret}"\n'
    )
    r = run("run", "--config", str(cfg), "--once")
    assert r.returncode == 2 and "group/other" in r.stderr


def test_run_once_simulated_writes_state(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'state_file = "{tmp_path}/s.json"\n[gpu]\nbackend = "simulated"\nsimulated_count = 2\n'
        f'[energy]\nrapl_root = "{tmp_path}/none"\n[exporter]\nenabled = false\n'
    )
    r = run("run", "--config", str(cfg), "--once")
    assert r.returncode == 0, r.stderr
    state = json.loads((tmp_path / "s.json").read_text())
    assert set(state["gpu_energy_total"]) == {"GPU-sim-0000", "GPU-sim-0001"}


def test_show_json_lists_gpus_and_nvml_state():
    r = run("show", "--backend", "simulated", "--json", "--wait", "0.2")
    doc = json.loads(r.stdout)
    assert len(doc["gpus"]) == 8
    assert abs(doc["gpus"][0]["energy_counter_growth_w"] - 70.0) < 7.0
    r = run("show", "--backend", "nvml", "--json", "--wait", "0.1")
    doc = json.loads(r.stdout)
    assert doc["backend_error"] is None or doc["backend_error"].startswith("NVML unavailable")


def test_show_reports_a_jobs_progress_rate(tmp_path):
    """`show` prints the rate co-location would read from the job's progress file."""
    progress = tmp_path / "progress"
    now = time.time()
    progress.write_text("".join(f"{now - 12 + i:.3f} {100 * i}\n" for i in range(13)))
    env = dict(os.environ, SLURM_JOB_ID="777", SLURM_EXT_PROGRESS_FILE=str(progress))
    child = subprocess.Popen(["sleep", "60"], env=env)
    try:
        _wait_exec(child.pid, "SLURM_JOB_ID=777")
        procs = tmp_path / "procs.json"
        procs.write_text(json.dumps([{"pid": child.pid, "gpu": 0, "sm_util": 0.5}]))
        config = tmp_path / "agent.toml"
        config.write_text(
            f'state_file = ""\n[gpu]\nbackend = "simulated"\nsimulated_processes_file = "{procs}"\n'
            '[jobs]\nsource = "environ"\n[report]\nenabled = false\n'
        )
        r = run("show", "--config", str(config), "--json", "--wait", "0.2")
        assert r.returncode == 0, r.stderr
        job = json.loads(r.stdout)["jobs"]["777"]
        assert job["mapped_by"] == "environ" and job["pids"] == [child.pid]
        assert job["progress_per_s"] == pytest.approx(100.0, rel=0.05)
    finally:
        child.kill()
        child.wait()
