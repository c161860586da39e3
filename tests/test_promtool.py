"""Both exporters pass `promtool check metrics`, scraped from running processes: a real
`slurm-ext-agent run` (simulated GPUs carrying real processes: one in a Slurm-like job
cgroup, one of user `nobody` in no job) and a real `slurm-ext serve` on the local Slurm
cluster with jobs queued. The jobstats names on the agent's /jobstats are checked too:
promtool's one complaint there is `nvidia_gpu_jobId`, the name jobstats queries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port, wait_for
from test_agent_service_e2e import secret_file, service_config, start, stop

pytestmark = pytest.mark.slurm
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian: apt-get install prometheus; scripts/install-deps.sh)",
)
GIB = 2**30


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def promtool(text: str) -> tuple[int, list[str]]:
    """promtool's exit status and its distinct complaints about `text`."""
    assert PROMTOOL is not None
    res = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return res.returncode, sorted({ln for ln in (res.stdout + res.stderr).splitlines() if ln})


@needs_promtool
def test_agent_metrics_pass_promtool(tmp_path, cg):
    job_pid = cg.start(4242)
    outsider = subprocess.Popen(["sleep", "120"], user="nobody")
    placement = tmp_path / "gpu-processes.json"
    placement.write_text(
        json.dumps(
            [
                {"pid": job_pid, "gpu": 0, "memory_bytes": 2 * GIB, "sm_util": 0.5},
                {"pid": outsider.pid, "gpu": 0, "memory_bytes": GIB, "sm_util": 0.1},
            ]
        )
    )
    port = free_port()
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'node_name = "promnode"\ninterval_s = 0.2\nstate_file = "{tmp_path / "state.json"}"\n'
        f'[gpu]\nbackend = "simulated"\nsimulated_count = 2\n'
        f'simulated_processes_file = "{placement}"\n'
        f'[energy]\nrapl_root = "{tmp_path / "no-rapl"}"\n'
        f'[exporter]\nlisten = "127.0.0.1"\nport = {port}\njobstats_compat = true\n'
        '[jobs]\nsource = "environ"\n'
    )
    agent = start(
        [sys.executable, "-m", "nodeagent.cli", "run", "--config", str(cfg)], tmp_path / "a.log"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        text = wait_for(
            lambda: (t := scrape(base + "/metrics")) and "node_cpu_utilization_ratio" in t and t,
            timeout=30,
            what="the agent's metrics with jobs, outside processes and the host",
        )
        assert 'slurm_ext_job_gpu_memory_used_bytes{gpu="0",jobid="4242",uuid="GPU-sim-0000"}' in (
            text
        )
        # who holds a GPU outside any job: the process of `nobody`, 1 GiB
        assert (
            'slurm_ext_gpu_processes_outside_jobs{gpu="0",user="nobody",uuid="GPU-sim-0000"} 1.0'
            in text
        )
        assert (
            'slurm_ext_gpu_memory_outside_jobs_bytes{gpu="0",user="nobody",uuid="GPU-sim-0000"} '
            "1.073741824e+09" in text
        )
        assert 'model_name="Simulated H100"' in text and "nvidia_gpu" not in text
        assert promtool(text) == (0, [])

        compat = scrape(base + "/jobstats")
        assert compat is not None
        assert (
            'nvidia_gpu_jobId{minor_number="0",name="Simulated H100",uuid="GPU-sim-0000"} 4242.0'
            in (compat)
        )
        rc, complaints = promtool(compat)
        assert rc != 0  # promtool does find the camelCase name ...
        assert complaints == [  # ... and nothing else
            "nvidia_gpu_jobId metric names should be written in 'snake_case' not 'camelCase'"
        ]
    finally:
        stop(agent)
        outsider.kill()
        outsider.wait(10)
    assert "Traceback" not in Path(tmp_path / "a.log").read_text()


@needs_promtool
def test_service_metrics_pass_promtool(clean_queue, tmp_path):
    for _ in range(3):
        clean_queue.sbatch("--gres=gpu:1", wrap="sleep 300")
    port = free_port()
    secret = secret_file(tmp_path / "report.secret", os.urandom(16).hex())
    service = start(
        [sys.executable, "-m", "slurm_ext.cli", "serve", "--config"]
        + [str(service_config(tmp_path, clean_queue, port, secret))],
        tmp_path / "service.log",
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        text = wait_for(
            lambda: (t := scrape(url)) and "slurm_ext_queue_jobs{" in t and t,
            timeout=60,
            what="a finished pass with jobs in the service's metrics",
        )
        assert "slurm_ext_slurm_call_errors_total 0.0" in text
        assert "slurm_ext_failed_passes_total 0.0" in text
        assert "slurm_ext_errors_total" not in text
        assert promtool(text) == (0, [])
    finally:
        stop(service)
