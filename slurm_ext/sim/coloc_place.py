"""Where the co-location simulator puts an opportunistic job: GPUs with a free shard
and room in memory (beside guaranteed jobs first), optionally ordered by the kinds'
learnt utilisation. A part `SharingSimulator` (sim/coloc.py) calls, over the GPUs it
shares (`GpuShares`) and the history its agents fill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_ext.sim.coloc_giveway import shard_offered_on
from slurm_ext.sim.coloc_gpus import GpuShares
from slurm_ext.sim.coloc_history import ColocHistory
from slurm_ext.sim.coloc_model import UNKNOWN, GpuKey, ShareConfig, kind_keys
from slurm_ext.sim.sharing import JobProfile
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob


class ShardPlacement:
    """The shards an opportunistic job may take now."""

    def __init__(
        self,
        shares: GpuShares,
        share: ShareConfig,
        profile: Mapping[int, JobProfile],
        trace: Mapping[int, TraceJob],
        history: ColocHistory,
        nodes: Sequence[str],
    ) -> None:
        self.shares, self.share, self.profile, self.trace = shares, share, profile, trace
        self.history, self.nodes = history, nodes
        self.paused_by: dict[int, set[int]] = {}  # requeued job id -> guaranteed job ids
        self.util_cache: dict[int, float | None] = {}  # `predicted_util`, per job id

    def room(self, k: GpuKey, prof: JobProfile) -> bool:
        """Whether GPU `k` has a free shard and memory for a job of this profile."""
        g = self.shares.gpus[k]
        jobs = ([g.guaranteed] if g.guaranteed else []) + g.opp
        if len(jobs) >= self.share.shards_per_gpu or (
            g.guaranteed is None and not self.share.on_idle
        ):
            return False
        if any(o in self.shares.paused for o in g.opp):
            return False  # the agent is protecting this GPU
        mem = sum(self.profile[j.id].mem for j in jobs) + prof.mem
        return mem <= self.share.memory_limit

    def find(self, job: SimJob, now: float) -> list[GpuKey] | None:
        """GPUs with room on one node (beside guaranteed jobs first), or any if wider
        than a node. With `learnt_placement`, GPUs whose kinds' learnt solo utilisations
        add up past 1 are skipped and the lowest predicted demand goes first (a kind
        without history counts as a full GPU, after those with history)."""
        sh = self.shares
        prof = self.profile[job.id]
        learnt = self.share.learnt_placement
        mine = self.predicted_util(job) if learnt else None
        per_node = []
        for node in self.nodes:
            room = [
                k
                for k in sh.node_gpus(node)
                if self.room(k, prof)
                and shard_offered_on(sh.gpus[k], job, self.share, self.paused_by, now)
            ]
            if learnt:
                scored = [(self.demand(k, mine), k) for k in room]
                room = [k for d, k in sorted(scored) if d <= 1.0 or d >= UNKNOWN]
            else:
                room.sort(key=lambda k: sh.gpus[k].guaranteed is None)
            per_node.append(room)
            if len(room) >= job.gpus:
                return room[: job.gpus]
        if job.gpus > sh.gpus_per_node:
            flat = [k for room in per_node for k in room]
            if len(flat) >= job.gpus:
                return flat[: job.gpus]
        return None

    def predicted_util(self, job: SimJob) -> float | None:
        """The job's solo utilisation as its kind's history has it (None: no history)."""
        if job.id in self.util_cache:
            return self.util_cache[job.id]
        self.util_cache[job.id] = None
        keys = kind_keys(self.trace[job.id])
        for kind in ("model", "name", "user"):
            if kind in keys:
                alone, _ = self.history.rows(kind, keys[kind])
                if alone is not None and alone.runs >= self.share.min_runs:
                    self.util_cache[job.id] = alone.util
                    break
        return self.util_cache[job.id]

    def demand(self, k: GpuKey, mine: float | None) -> float:
        """GPU `k`'s predicted demand with a job of solo utilisation `mine` added."""
        g = self.shares.gpus[k]
        total = mine if mine is not None else UNKNOWN
        for j in ([g.guaranteed] if g.guaranteed else []) + g.opp:
            u = self.predicted_util(j)
            total += u if u is not None else UNKNOWN
        return total
