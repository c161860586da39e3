"""A real node agent reporting to the real service: a process in a Slurm-like job cgroup on
a simulated GPU, its report stored by the service; a wrong secret is refused, the agent
keeps its batches spooled and delivers them once restarted with the right secret."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port, wait_for

from nodeagent.cgroups import read_mounts
from nodeagent.testing import SlurmLikeCgroups
from slurm_ext.store.db import Store, StoreError
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm
GIB = 2**30
NODE = "e2enode"
SIM_IDLE_W = 70.0  # SimGpu's default power


def secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


def service_config(tmp: Path, cluster: LocalCluster, port: int, secret: Path) -> Path:
    cfg = tmp / "service.toml"
    cfg.write_text(
        f'interval_s = 1.0\nstore = "{tmp / "service.db"}"\nport = {port}\n'
        f'report_secret_file = "{secret}"\n'
        f'[slurm]\nbackend = "cli"\nslurm_conf = "{cluster.conf_path}"\ntimeout_s = 10\n'
    )
    return cfg


def agent_config(tmp: Path, url: str, secret: Path, placement: Path) -> Path:
    cfg = tmp / f"agent-{secret.name}.toml"
    cfg.write_text(
        f'node_name = "{NODE}"\ninterval_s = 0.2\nstate_file = "{tmp / "agent-state.json"}"\n'
        f'[gpu]\nbackend = "simulated"\nsimulated_count = 2\n'
        f'simulated_processes_file = "{placement}"\n'
        f'[energy]\nrapl_root = "{tmp / "no-rapl"}"\n'
        "[exporter]\nenabled = false\n"
        f'[report]\nenabled = true\nservice_url = "{url}"\nsecret_file = "{secret}"\n'
        f'interval_s = 0.5\ntimeout_s = 5\nspool_dir = "{tmp / "spool"}"\nbackoff_max_s = 1.0\n'
        "[colocation]\nenabled = false\n"
    )
    return cfg


def start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def metrics_text(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def metric(url: str, name: str) -> float:
    """A sample's value from /metrics (0 when absent)."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", metrics_text(url) or "", re.M)
    return float(m.group(1)) if m else 0.0


def stored(db: Path, job: int) -> list:
    try:
        store = Store(db, readonly=True)
    except StoreError:
        return []
    try:
        return store.reports(job)
    finally:
        store.close()


def test_agent_reports_reach_the_service_and_survive_a_wrong_secret(clean_queue, tmp_path):
    mounts = read_mounts()
    cg = (
        SlurmLikeCgroups(1, mounts.v1["freezer"])
        if "freezer" in mounts.v1
        else SlurmLikeCgroups(2, mounts.v2)
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    db = tmp_path / "service.db"
    good = secret_file(tmp_path / "good.secret", os.urandom(16).hex())
    bad = secret_file(tmp_path / "bad.secret", os.urandom(16).hex())
    placement = tmp_path / "gpu-processes.json"
    placement.write_text("[]")
    agent_cmd = [sys.executable, "-m", "nodeagent.cli", "run", "--config"]
    service = start(
        [sys.executable, "-m", "slurm_ext.cli", "serve", "--config"]
        + [str(service_config(tmp_path, clean_queue, port, good))],
        tmp_path / "service.log",
    )
    procs = [service]
    try:
        wait_for(lambda: metrics_text(url) is not None and db.exists(), what="service up")
        # phase 1: job 4711's process holds 2 GiB on GPU 0 at 50 % of its SMs
        pid1 = cg.start(4711)
        placement.write_text(
            json.dumps([{"pid": pid1, "gpu": 0, "memory_bytes": 2 * GIB, "sm_util": 0.5}])
        )
        agent = start(
            agent_cmd + [str(agent_config(tmp_path, url, good, placement))], tmp_path / "a1.log"
        )
        procs.append(agent)
        reps = wait_for(
            lambda: [r for r in stored(db, 4711) if r.gpu_seconds >= 1.5],
            timeout=15,
            what="a report of job 4711 with >= 1.5 GPU-s in the service's store",
        )
        r = reps[-1]
        assert r.node == NODE and list(r.gpu_uuids) == ["GPU-sim-0000"]
        assert r.gpu_type == "Simulated H100" and r.gpu_mem_peak_bytes == 2 * GIB
        assert r.gpu_util_mean == pytest.approx(0.5) and r.gpu_util_peak == pytest.approx(0.5)
        # alone on GPU 0 at 70 W: all of its energy, over the same intervals as the GPU-s
        assert r.gpu_energy_j == pytest.approx(SIM_IDLE_W * r.gpu_seconds, rel=0.1)
        assert r.gpu_seconds <= r.period_end - r.period_start + 0.5
        assert r.cpu_energy_j == 0.0  # no RAPL here
        stop(agent)

        # phase 2: the same agent with a wrong secret; job 4711 ends, job 4712 on GPU 1
        cg.procs[0].kill()
        cg.procs[0].wait(10)
        t_phase2 = time.time()
        pid2 = cg.start(4712)
        placement.write_text(
            json.dumps([{"pid": pid2, "gpu": 1, "memory_bytes": GIB, "sm_util": 0.25}])
        )
        refused0 = metric(url, 'slurm_ext_reports_refused_total{reason="signature"}')
        wrong = start(
            agent_cmd + [str(agent_config(tmp_path, url, bad, placement))], tmp_path / "a2.log"
        )
        procs.append(wrong)
        spool = tmp_path / "spool"
        wait_for(
            lambda: (
                metric(url, 'slurm_ext_reports_refused_total{reason="signature"}') >= refused0 + 2
            ),
            timeout=15,
            what="the service refusing the wrong signature twice",
        )
        wait_for(lambda: len(list(spool.glob("batch-*.json"))) >= 3, what="three spooled batches")
        stop(wrong)
        t_wrong_stopped = time.time()
        batches = sorted(spool.glob("batch-*.json"))
        spooled = sum(len(json.loads(b.read_bytes())["reports"]) for b in batches)
        assert any(
            rep["job_id"] == 4712 for b in batches for rep in json.loads(b.read_bytes())["reports"]
        )
        assert stored(db, 4712) == []  # nothing got in with the wrong secret
        received0 = metric(url, "slurm_ext_reports_received_total")

        # phase 3: restarted with the right secret, the spool drains, nothing lost
        agent = start(
            agent_cmd + [str(agent_config(tmp_path, url, good, placement))], tmp_path / "a3.log"
        )
        procs.append(agent)
        wait_for(
            lambda: (
                metric(url, "slurm_ext_reports_received_total") >= received0 + spooled
                and not any(b.exists() for b in batches)
            ),
            timeout=15,
            what=f"the {len(batches)} spooled batches ({spooled} reports) delivered",
        )
        # the spool holds reports from before the stop; the restarted agent's own next
        # report (same period, later end) must replace them
        r2 = wait_for(
            lambda: next((r for r in stored(db, 4712) if r.period_end > t_wrong_stopped), None),
            timeout=15,
            what="a report of job 4712 from after the restart",
        )
        assert list(r2.gpu_uuids) == ["GPU-sim-0001"] and r2.gpu_mem_peak_bytes == GIB
        assert r2.gpu_energy_j == pytest.approx(SIM_IDLE_W * r2.gpu_seconds, rel=0.1)
        # the account began under the wrong-secret run and went on (state file)
        assert t_phase2 <= r2.period_start < t_wrong_stopped < r2.period_end
        # job 4711 ended during phase 2: its final report, spooled then, arrived as well
        finals = [rep for rep in stored(db, 4711) if rep.final]
        assert len(finals) == 1 and finals[0].period_end < t_wrong_stopped
        assert finals[0].gpu_seconds >= r.gpu_seconds
    finally:
        for p in reversed(procs):
            stop(p)
        cg.close()
    assert "bad or missing signature" in (tmp_path / "service.log").read_text()
