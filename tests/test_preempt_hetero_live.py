"""Preemption on a heterogeneous live Slurm (22.05 and 25.11): the service requeues a
running checkpointing job only for a waiting job that could start, and only on the nodes
it can use; its placement hints stay in the job's partition and GPU type.

The cluster of testing/record_cluster.py: 2 nodes x 4 a100 in partition a100, 2 x 8 h100
in partition h100, a QOS (gpu16, root's default) of 4 GPUs per user. Fillers run under
QOS normal (no cap) but one, which holds the user's 4 gpu16 GPUs. Before the rule, live
on 22.05, the service requeued a100 jobs again and again for a waiting h100 job and for
a job held by `Dependency`: every such requeue is counted here as useless and must be 0.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import live_client, wait_for

from slurm_ext.policy import PolicyConfig
from slurm_ext.service.loop import PassResult, Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

CKPT = ("--requeue", "--comment=checkpoint=1")
# a job past 10 GPU-s leaves queue 0: every waiting job ranks above every filler
POLICY = PolicyConfig(
    queue_thresholds_gpu_s=[10.0], queue_gpu_exponent=0.0, min_run_s=0.0, preemption_cost=False
)


def squeue(cluster: LocalCluster, job: int) -> list[str]:
    """[state, reason, nodes] of one job, as squeue prints them."""
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T|%r|%N").strip().split("|")


def service(cluster: LocalCluster, tmp_path: Path, **cfg: object) -> tuple[Service, Store]:
    store = Store(tmp_path / "service.db")
    config = ServiceConfig(
        store=str(store.path), port=0, history_source="store", policy=POLICY, **cfg
    )
    return Service(config, live_client(cluster, "cli"), store), store


def running(cluster: LocalCluster, jobs: list[int]) -> None:
    wait_for(
        lambda: all(squeue(cluster, j)[0] == "RUNNING" for j in jobs),
        timeout=30,
        what=f"jobs {jobs} running",
    )


def pending_with(cluster: LocalCluster, job: int, reason: str) -> None:
    wait_for(lambda: squeue(cluster, job)[1] == reason, timeout=30, what=f"{job}: {reason}")


def passes(svc: Service, n: int = 3) -> list[PassResult]:
    out = []
    for _ in range(n):
        out.append(svc.run_pass())
        time.sleep(0.5)
    return out


def test_requeues_only_for_a_startable_job_where_it_can_run(
    empty: LocalCluster, tmp_path: Path
) -> None:
    c = empty
    a100 = [
        c.sbatch("-p", "a100", "--gres=gpu:a100:4", *CKPT, "-J", "fill-a1"),  # gpu16: the cap
        c.sbatch("-p", "a100", "--gres=gpu:a100:4", "--qos=normal", *CKPT, "-J", "fill-a2"),
    ]
    # the h100 fillers do not checkpoint: no job on the h100 nodes may be requeued
    h100 = [
        c.sbatch("-p", "h100", "--gres=gpu:h100:8", "--qos=normal", "--requeue", "-J", f"fh{i}")
        for i in range(2)
    ]
    running(c, a100 + h100)
    svc, store = service(c, tmp_path, preemption="requeue")
    svc.run_pass()  # records their starts
    time.sleep(3)  # 12 GPU-s and more each: queue 1
    dep = c.sbatch("-p", "a100", "--gres=gpu:a100:4", "--qos=normal",
                   f"--dependency=afterok:{h100[0]}", "-J", "dep")  # fmt: skip
    qos = c.sbatch("-p", "a100", "--gres=gpu:a100:1", "-J", "over-qos")
    other = c.sbatch("-p", "h100", "--gres=gpu:h100:8", "--qos=normal", "-J", "h100-job")
    pending_with(c, dep, "Dependency")
    pending_with(c, qos, "QOSMaxGRESPerUser")
    wait_for(lambda: squeue(c, other)[1] in ("Resources", "Priority"), what="h100 job waits")
    useless = [j for r in passes(svc) for j in r.requeued]
    assert useless == []
    notes = {j: d.reason for j, d in store.decisions().items()}
    assert notes[dep].endswith("waits on a dependency: no job is requeued for it"), notes[dep]
    assert notes[qos].endswith("is over a QOS limit: no job is requeued for it"), notes[qos]
    assert notes[other].endswith(
        "no job is requeued for it: no running job ranked below it on the nodes it can use "
        "checkpoints (opted in)"
    ), notes[other]
    assert all(squeue(c, j)[0] == "RUNNING" for j in a100 + h100)
    # a startable a100 job gets one a100 node cleared, and starts there
    for j in (dep, qos, other):
        c.run("scancel", str(j))
    want = c.sbatch("-p", "a100", "--gres=gpu:a100:4", "--qos=normal", "-J", "a100-job")
    wait_for(lambda: squeue(c, want)[1] in ("Resources", "Priority"), what="a100 job waits")
    requeued = [j for r in passes(svc, 2) for j in r.requeued]
    assert len(requeued) == 1 and requeued[0] in a100, requeued
    running(c, [want])
    assert squeue(c, want)[2].startswith("a100-"), squeue(c, want)
    store.close()


def test_placement_hints_stay_in_the_jobs_partition_and_type(
    empty: LocalCluster, tmp_path: Path
) -> None:
    c = empty
    # a100-1 and h100-1 both have exactly 2 GPUs free: pooled, a100-1 (first) fits best
    busy = [
        c.sbatch("-p", "a100", "-w", "a100-1", "--gres=gpu:a100:2", "--qos=normal", "-J", "b1"),
        c.sbatch("-p", "a100", "-w", "a100-2", "--gres=gpu:a100:4", "--qos=normal", "-J", "b2"),
        c.sbatch("-p", "h100", "-w", "h100-1", "--gres=gpu:h100:6", "--qos=normal", "-J", "b3"),
        c.sbatch("-p", "h100", "-w", "h100-2", "--gres=gpu:h100:8", "--qos=normal", "-J", "b4"),
    ]
    running(c, busy)
    job = c.sbatch("-p", "h100", "--gpus=2", "--qos=normal", "--begin=now+8", "-J", "placed")
    svc, store = service(c, tmp_path, placement=True, placement_mode="consolidate")
    res = svc.run_pass()
    assert res.placements.get(job) == ("h100-1",), res.placements
    shown = c.run("scontrol", "show", "job", str(job))
    assert "ExcNodeList=a100-[1-2],h100-2" in shown, shown
    wait_for(lambda: squeue(c, job)[0] == "RUNNING", timeout=30, what="placed job running")
    assert squeue(c, job)[2] == "h100-1"
    store.close()
