"""`slurm-ext energy` on a real SQLite store: cumulative reports from two nodes, delivered
more than once, summed per job without double counting (figures computed by hand)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli import main
from slurm_ext.core.reports import JobReport
from slurm_ext.store.db import Store
from slurm_ext.store.rows import JobRecord

GIB = 2**30


def rep(node: str, job: int, start: float, end: float, **kw: object) -> JobReport:
    values: dict = dict(
        gpu_seconds=0.0,
        gpu_util_mean=0.0,
        gpu_util_peak=0.0,
        gpu_mem_peak_bytes=0,
        cpu_cores_alloc=4,
        cpu_cores_used=1.0,
        gpu_energy_j=0.0,
        cpu_energy_j=0.0,
        gpu_uuids=("GPU-a",),
        gpu_type="H100",
        samples=3,
        final=False,
    )
    values.update(kw)
    return JobReport(node=node, job_id=job, period_start=start, period_end=end, **values)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    db = tmp_path / "service.db"
    store = Store(db)
    # job 100 on gpu01: two cumulative reports, the latest delivered twice
    r1 = rep("gpu01", 100, 1000, 1010, gpu_seconds=10, gpu_energy_j=1000, cpu_energy_j=50,
             gpu_util_mean=0.5, gpu_util_peak=0.6, gpu_mem_peak_bytes=2 * GIB)  # fmt: skip
    r2 = rep("gpu01", 100, 1000, 1030, gpu_seconds=30, gpu_energy_j=3500, cpu_energy_j=120,
             gpu_util_mean=0.6, gpu_util_peak=0.9, gpu_mem_peak_bytes=3 * GIB)  # fmt: skip
    # job 100 on gpu02 (2 GPUs x 20 s), final, delivered twice
    s1 = rep("gpu02", 100, 1005, 1025, gpu_seconds=40, gpu_energy_j=6000, cpu_energy_j=200,
             gpu_util_mean=0.3, gpu_util_peak=0.5, gpu_mem_peak_bytes=5 * GIB, final=True)  # fmt: skip
    # job 200 on gpu01: a period before an agent state loss, then a new period from zero;
    # the two periods add up
    t_old = rep("gpu01", 200, 900, 950, gpu_seconds=50, gpu_energy_j=5000, cpu_energy_j=40)
    t_new = rep("gpu01", 200, 960, 990, gpu_seconds=30, gpu_energy_j=2400, cpu_energy_j=10,
                gpu_util_mean=1.0, gpu_util_peak=1.0, gpu_mem_peak_bytes=GIB, final=True)  # fmt: skip
    for batch in ([r1], [r2, s1], [r2], [s1], [t_old], [t_new]):
        store.add_reports(batch)
    store.save_jobs(
        [
            JobRecord(
                100,
                "alice",
                "gpu",
                "train",
                None,
                3,
                990.0,
                0.0,
                0.0,
                0.0,
                None,
                None,
                1030.0,
                "RUNNING",
                False,
            )  # fmt: skip
        ]
    )
    store.close()
    cfg = tmp_path / "service.toml"
    cfg.write_text(f'store = "{db}"\n')
    return cfg


def energy(config: Path, *args: str) -> dict:
    res = CliRunner().invoke(main, ["energy", "--config", str(config), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_json_sums_latest_report_per_node_and_job(config):
    doc = energy(config)
    jobs = {j["job_id"]: j for j in doc["jobs"]}
    assert sorted(jobs) == [100, 200]
    j = jobs[100]
    assert j["nodes"] == ["gpu01", "gpu02"] and j["user"] == "alice"
    assert j["gpu_seconds"] == pytest.approx(30 + 40)
    assert j["gpu_energy_j"] == pytest.approx(3500 + 6000)
    assert j["gpu_energy_kwh"] == pytest.approx(9500 / 3.6e6)
    assert j["cpu_energy_j"] == pytest.approx(120 + 200)
    assert j["gpu_util_mean"] == pytest.approx((0.6 * 30 + 0.3 * 40) / 70)
    assert j["gpu_util_peak"] == pytest.approx(0.9)
    assert j["gpu_mem_peak_bytes"] == 5 * GIB
    assert (j["period_start"], j["period_end"], j["final"]) == (1000, 1030, False)
    k = jobs[200]
    assert (k["gpu_seconds"], k["gpu_energy_j"], k["cpu_energy_j"]) == (
        50 + 30,
        5000 + 2400,
        40 + 10,
    )
    assert k["user"] == "" and k["final"] is True
    assert doc["totals"] == pytest.approx(
        {
            "jobs": 2,
            "gpu_seconds": 150,
            "gpu_energy_j": 16900,
            "gpu_energy_kwh": 16900 / 3.6e6,
            "cpu_energy_j": 370,
        }
    )


def test_filters(config):
    assert [j["job_id"] for j in energy(config, "--job", "200")["jobs"]] == [200]
    only_alice = energy(config, "--user", "alice")
    assert [j["job_id"] for j in only_alice["jobs"]] == [100]
    assert only_alice["totals"]["gpu_energy_j"] == pytest.approx(9500)
    assert [j["job_id"] for j in energy(config, "--since", "1000")["jobs"]] == [100]
    assert energy(config, "--since", "1h")["jobs"] == []  # the data is from 1970
    res = CliRunner().invoke(main, ["energy", "--config", str(config), "--since", "soon"])
    assert res.exit_code == 2 and "expected unix seconds" in res.output


def test_text_table_and_read_only(config, tmp_path):
    db = tmp_path / "service.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    res = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", "energy", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:2] == ["JOBID", "USER"]
    assert "gpu01,gpu02 (running)" in lines[1] and "9.5" in lines[1]
    assert lines[-1] == "total: 2 jobs, 150s GPU-time, GPU 16.9 kJ (0.005 kWh), CPU 0.4 kJ"
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    missing = tmp_path / "other.toml"
    missing.write_text(f'store = "{tmp_path / "none.db"}"\n')
    res = CliRunner().invoke(main, ["energy", "--config", str(missing)])
    assert res.exit_code == 1 and "store not found" in res.output
