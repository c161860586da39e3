"""The service against a real slurmctld under a hostile owner and a reset controller
(issue 15, items 3 and 5): shrinking a running job never lowers its recorded service, and
job ids that Slurm hands out again after its state was reset start from nothing, with
the site factor really written."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import wait_for
from test_service_live import queue_jobs, start_service, stop, write_config

from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm


def queue_rows(config: Path) -> dict[int, dict]:
    return {r["job_id"]: r for r in queue_jobs(config)}


def state(cluster: LocalCluster, job: int) -> str:
    out = cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False)
    return out.strip() or "GONE"


def test_shrinking_a_running_job_never_lowers_its_service(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(tmp_path / "service.toml", c)
    service = start_service(config, tmp_path / "service.log")
    try:
        job = c.sbatch("-N2", "--gres=gpu:4", "-J", "wide")
        wait_for(lambda: state(c, job) == "RUNNING", what="2-node job running")
        wait_for(lambda: queue_rows(config).get(job, {}).get("attained_gpu_s", 0) >= 60,
                 timeout=40, what="8-GPU job past 60 GPU-s")  # fmt: skip
        before = queue_rows(config)[job]["attained_gpu_s"]
        c.run("scontrol", "update", f"JobId={job}", "NumNodes=1")  # as its owner could
        wait_for(lambda: c.run("squeue", "-h", "-j", str(job), "-o", "%D").strip() == "1",
                 what="job shrunk to one node")  # fmt: skip
        seen = []
        for _ in range(4):
            time.sleep(1.0)
            seen.append(queue_rows(config)[job]["attained_gpu_s"])
        assert all(v >= before for v in seen) and seen == sorted(seen), (before, seen)
    finally:
        stop(service)


def _reset_slurmctld(c: LocalCluster) -> None:
    """Wipe slurmctld's saved state, as a reinstalled controller would: ids start at 1."""
    c.run("scancel", "--full", f"--partition={c.partition}", check=False)
    wait_for(lambda: not c.run("squeue", "-h", "-o", "%i", check=False).strip(),
             what="queue empty")  # fmt: skip
    c.stop_slurmctld()
    assert c.root is not None
    shutil.rmtree(c.root / "state")
    (c.root / "state").mkdir()
    c.start_slurmctld()
    c.wait_idle(60)


def test_reused_job_ids_start_from_nothing_and_get_their_site_factor(tmp_path):
    """The service is down while slurmctld's state is reset and new jobs arrive: at its
    next start the store holds records and written values under the ids they reuse."""
    with LocalCluster(nodes=1, gpus_per_node=4, cpus_per_node=8) as c:
        config = write_config(tmp_path / "service.toml", c)
        service = start_service(config, tmp_path / "service.log")
        try:
            runner = c.sbatch("--gres=gpu:4", "-J", "old-runner")
            waiter = c.sbatch("--gres=gpu:4", "-J", "old-waiter")
            assert (runner, waiter) == (1, 2)
            wait_for(lambda: state(c, runner) == "RUNNING", what="old job 1 running")

            def old_ranked() -> bool:
                rows = queue_rows(config)
                return (rows.get(runner, {}).get("attained_gpu_s", 0) >= 20
                        and rows.get(waiter, {}).get("value_set") is not None)  # fmt: skip

            wait_for(old_ranked, timeout=40, what="old job 1 past 20 GPU-s, job 2 valued")
        finally:
            stop(service)
        _reset_slurmctld(c)
        new = [c.sbatch("--hold", "--gres=gpu:4", "-J", f"new-{i}") for i in (1, 2)]
        blocker = c.sbatch("--gres=gpu:4", "-J", "new-blocker")
        assert new == [1, 2]
        wait_for(lambda: state(c, blocker) == "RUNNING", what="new blocker running")
        c.run("scontrol", "release", "1,2")
        service = start_service(config, tmp_path / "service.log")
        try:

            def ranked() -> dict | None:
                rows = queue_rows(config)
                both = all(rows.get(j, {}).get("value_set") is not None for j in new)
                return rows if both else None

            wait_for(ranked, timeout=40, what="service ranked the new jobs 1 and 2")
            time.sleep(2.0)  # a few more passes: a write it believed done would not repeat
            rows = queue_rows(config)
            assert [rows[j]["attained_gpu_s"] for j in new] == [0, 0], rows
            for j in new:
                site = int(c.run("sprio", "-h", "-j", str(j), "-o", "%S").split()[0])
                assert site == rows[j]["value_set"] > 0, (j, site, rows[j])
        finally:
            stop(service)
