"""The simulated cluster's state: its nodes, their free GPUs (and cores), who holds what.

`ClusterState` is the one place where a start takes resources and a stop gives them
back, so free GPUs, free cores and the per-node job lists cannot disagree. It also
turns trace jobs into `SimJob`s for this cluster's shape (`sim_jobs`): the cores a job
needs per GPU, whether it must consolidate, whether it may be preempted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from slurm_ext.policy import FreeIndex, consolidate_for, network_sensitive
from slurm_ext.sim.cpus import cpu_speed, even_share
from slurm_ext.sim.simjob import SimConfig, SimJob
from slurm_ext.sim.traces import TraceJob

Alloc = list[tuple[str, int]]  # (node, GPUs) per node a job holds


class ClusterState:
    """Nodes n0..n{N-1}, their free GPUs (`idx`), free cores (`free_cpus`, None when
    cores are not counted) and, per node, the running jobs with their GPUs there."""

    def __init__(self, cl: SimConfig) -> None:
        self.idx = FreeIndex(cl.gpus_per_node)
        for i in range(cl.nodes):
            self.idx.set(f"n{i}", cl.gpus_per_node)
        self.node_names = list(self.idx.free)
        self.node_pos = {n: i for i, n in enumerate(self.node_names)}
        self.total_gpus = cl.nodes * cl.gpus_per_node
        self.free_cpus: dict[str, int] | None = (
            dict.fromkeys(self.node_names, cl.cpus_per_node) if cl.cpus_per_node else None
        )
        self.on_node: dict[str, dict[SimJob, int]] = {n: {} for n in self.node_names}

    def cpus(self, cpus_per_gpu: int) -> tuple[dict[str, int], int] | None:
        """What `choose_gpus` needs to count cores too (None when cores are off)."""
        return None if self.free_cpus is None else (self.free_cpus, cpus_per_gpu)

    def fits(self, alloc: Alloc, cpus_per_gpu: int) -> bool:
        """Whether `alloc`'s GPUs (and cores, when counted) are free right now."""
        free, cpus = self.idx.free, self.free_cpus
        if cpus is None:
            return all(free[n] >= g for n, g in alloc)
        return all(free[n] >= g and cpus[n] >= g * cpus_per_gpu for n, g in alloc)

    def take(self, job: SimJob, alloc: Alloc) -> None:
        """`job` starts on `alloc`: its GPUs and cores are no longer free."""
        self.idx.take(alloc)
        cpus, on_node = self.free_cpus, self.on_node
        for n, g in alloc:
            on_node[n][job] = g
            if cpus is not None:
                cpus[n] -= g * job.cpus_per_gpu

    def leave(self, job: SimJob, release: bool = True) -> None:
        """`job` stops: it leaves its nodes' lists; `release` gives back its GPUs and
        cores (False: the caller does, e.g. a sharing model that tracks them itself)."""
        for n, _ in job.alloc:
            del self.on_node[n][job]
        if release:
            self.give(job.alloc, job.cpus_per_gpu)

    def give(self, alloc: Alloc, cpus_per_gpu: int) -> None:
        self.idx.give(alloc)
        if self.free_cpus is not None:
            for n, g in alloc:
                self.free_cpus[n] += g * cpus_per_gpu


def sim_jobs(trace: Sequence[TraceJob], cl: SimConfig) -> tuple[list[SimJob], bool]:
    """The trace's jobs on this cluster, and whether every one may be preempted.

    Raises ValueError, naming the job, for one the cluster cannot hold, and for an id
    two jobs share: the simulator finds a job by its id (the backfill pass's starts), so
    a shared id would start one job in place of another, one that may have finished,
    again and again without end.
    """
    # network sensitivity per model tag (a trace has few): the test per job was 1.5 %
    # of a 100,000-job run
    sensitive: dict[str | None, bool] = {}
    jobs = [_sim_job(t, cl, sensitive) for t in trace]
    total = cl.nodes * cl.gpus_per_node
    ids: set[int] = set()
    for j in jobs:
        if j.gpus > total:
            raise ValueError(f"job {j.id} needs {j.gpus} GPUs, the cluster has {total}")
        if j.id in ids:
            raise ValueError(f"job id {j.id} is given to two jobs: ids must be unique")
        ids.add(j.id)
    return jobs, _draw_preemptible(jobs, trace, cl)


def _sim_job(t: TraceJob, cl: SimConfig, sensitive: dict[str | None, bool]) -> SimJob:
    tag = t.model_tag
    net = sensitive.get(tag)
    if net is None:
        net = sensitive[tag] = network_sensitive(tag)
    must = consolidate_for(cl.placement, net)
    if not cl.cpus_per_node:
        return SimJob(t, must)
    cpg = t.cpus_per_gpu or even_share(cl.cpus_per_node, cl.gpus_per_node)
    if cpg < 1:
        raise ValueError(f"job {t.job_id}: cpus_per_gpu must be >= 1, got {cpg}")
    # the GPUs it needs on one node: all of them (up to a node's) when consolidated
    per_node = min(t.gpus, cl.gpus_per_node) if must else 1
    if per_node * cpg > cl.cpus_per_node:
        raise ValueError(
            f"job {t.job_id} needs {per_node * cpg} cores on a node "
            f"({per_node} GPUs x {cpg}), a node has {cl.cpus_per_node}"
        )
    return SimJob(t, must, cpg, cpu_speed(t.model_tag, cpg, cl.cpu_knees))


def _draw_preemptible(jobs: list[SimJob], trace: Sequence[TraceJob], cl: SimConfig) -> bool:
    """Mark the jobs that may be preempted; True if all may (see SimConfig)."""
    f = cl.preemptible_fraction
    if f is None and not any(t.checkpoint for t in trace):
        return True
    for job, t in zip(jobs, trace, strict=True):
        if f is None:
            job.preemptible = t.checkpoint
        else:
            job.preemptible = random.Random(f"{cl.seed}:{t.job_id}").random() < f
    return all(j.preemptible for j in jobs)
