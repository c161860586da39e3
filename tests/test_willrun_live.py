"""The start Slurm's backfill plans for a blocked job, live, against the simulator's
will-run rule (`sim.willrun`): on 2 nodes x 4 GPUs, job A holds node1 and job B, 8 s
later, node2, both with 1-minute limits; a pending whole-node job P is planned after
the first will-run batch, which takes both off (their ends lie 8 s apart, within one
30 s window). cons_tres places P on node1 (consecutive best fit, first of a tie);
Slurm 25.11 reports node1's last end (A's), 22.05 the batch's last end (B's), which is
what `SimConfig.bf_willrun_start` "nodes" and "batch" model."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from conftest import SLURM_VERSIONS, cluster_options, wait_for

from slurm_ext.sim.backfill import Candidate, Profile
from slurm_ext.sim.willrun import willrun_start
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm


@pytest.fixture(params=SLURM_VERSIONS)
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    c = LocalCluster(
        nodes=2,
        gpus_per_node=4,
        cpus_per_node=4,
        memory_mb=8000,
        # a backfill pass every second, times to the second
        extra_conf="SchedulerParameters=sched_interval=1,bf_interval=1,bf_resolution=1",
        **cluster_options(request.param),
    )
    c.start()
    try:
        yield c
    finally:
        c.cleanup()


def _time(cluster: LocalCluster, job: int, field: str) -> float | None:
    """A job's squeue time field (%S start, %e end) as epoch seconds; None if unset."""
    text = cluster.run("squeue", "-h", "-j", str(job), "-o", field).strip()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _running(cluster: LocalCluster, job: int) -> bool:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING"


def test_backfill_plans_a_blocked_job_from_the_will_run_batch(cluster: LocalCluster):
    a = cluster.sbatch("-w", "node1", "--gres=gpu:4", "--time=1", "-J", "A")
    wait_for(lambda: _running(cluster, a), what="job A to run")
    time.sleep(8)  # ends apart by more than the 1 s tolerance, within one window
    b = cluster.sbatch("-w", "node2", "--gres=gpu:4", "--time=1", "-J", "B")
    wait_for(lambda: _running(cluster, b), what="job B to run")
    p = cluster.sbatch("--gres=gpu:4", "--time=1", "-J", "P", wrap="true")
    a_end, b_end = _time(cluster, a, "%e"), _time(cluster, b, "%e")
    assert a_end is not None and b_end is not None and 5 <= b_end - a_end <= 20
    # backfill gives the pending job its planned start (a few passes to settle)
    time.sleep(4)
    start = wait_for(lambda: _time(cluster, p, "%S"), what="P's planned start")
    rule = "batch" if cluster.version < (24, 0) else "nodes"
    expected = b_end if rule == "batch" else a_end
    assert abs(start - expected) <= 1, (cluster.version, start - a_end, start - b_end)

    # the simulator's will-run answer on the same state (epoch seconds, as Slurm aligns)
    ends = {"node1": [(math.ceil(a_end), 4)], "node2": [(math.ceil(b_end), 4)]}
    profile = Profile(math.floor(time.time()), {"node1": 0, "node2": 0}, ends)
    job = Candidate(1, 4, True, 60.0)
    exact, _ = profile.earliest(job, 4, 60.0, math.inf)
    got = willrun_start(profile, job, 4, 60.0, math.inf, 30.0, exact, rule == "batch")
    assert got == (math.ceil(expected), [("node1", 4)])
