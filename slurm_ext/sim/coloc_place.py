"""Where the co-location simulator puts an opportunistic job: GPUs with a free shard
and room in memory (beside guaranteed jobs first), optionally ordered by the kinds'
learnt utilisation; a mixin of `SharingSimulator` (sim/coloc.py), which holds the GPUs,
the queue and the history it reads.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from slurm_ext.sim.coloc_model import UNKNOWN, GpuKey, Track, kind_keys
from slurm_ext.sim.sharing import JobProfile

if TYPE_CHECKING:
    from slurm_ext.sim.coloc import SharingSimulator
    from slurm_ext.sim.engine import SimJob


class ShardPlacement:
    def _node_gpus(self: SharingSimulator, node: str) -> list[GpuKey]:
        return [(node, i) for i in range(self.cl.gpus_per_node)]

    def _room(self: SharingSimulator, k: GpuKey, prof: JobProfile) -> bool:
        g = self.gpus[k]
        jobs = ([g.guaranteed] if g.guaranteed else []) + g.opp
        if len(jobs) >= self.share.shards_per_gpu or (
            g.guaranteed is None and not self.share.on_idle
        ):
            return False
        if any(o in self.paused for o in g.opp):
            return False  # the agent is protecting this GPU
        mem = sum(self.profile[j.id].mem for j in jobs) + prof.mem
        return mem <= self.share.memory_limit

    def _place_opportunistic(self: SharingSimulator, now: float) -> None:
        keep = []
        while self.opp_queue:
            entry = heapq.heappop(self.opp_queue)
            job = entry[2]
            if job.running or job.finish is not None or job.stints > 0:
                continue  # the engine gave it whole GPUs: it stays the engine's
            limit = self.share.max_shard_gpus
            if limit and job.gpus > limit and self.share.whole_gpus:
                continue  # whole GPUs only
            keys = self._find(job)
            if keys is None:
                keep.append(entry)
                continue
            self._touch(keys)
            for k in keys:
                self.gpus[k].opp.append(job)
                self.changed.add(k[0])
            self.placed[job] = keys
            self.on_shards.add(job)
            self.shard_starts += 1
            job.running = True
            job.killed = False
            job.key_ver += 1  # its entry in the engine's queue goes stale
            self.pending_ver += 1
            if self.share.whole_gpus:
                self.n_pending -= 1  # the engine counted it pending
                self.bf_changed = True
            job.start = now
            if job.first_start is None:
                job.first_start = now
            # _respeed sets rate and speed and pushes the stint's end (its time limit
            # even when paused at once: speed -1 is "not computed yet", never skipped);
            # a requeued job goes on from its checkpoint
            self.track[job] = Track(now, job.progress, 0.0, now, speed=-1.0, p_start=job.progress)
        for entry in keep:
            heapq.heappush(self.opp_queue, entry)

    def _find(self: SharingSimulator, job: SimJob) -> list[GpuKey] | None:
        """GPUs with room on one node (beside guaranteed jobs first), or any if wider
        than a node. With `learnt_placement`, GPUs whose kinds' learnt solo utilisations
        add up past 1 are skipped and the lowest predicted demand goes first (a kind
        without history counts as a full GPU, after those with history)."""
        prof = self.profile[job.id]
        learnt = self.share.learnt_placement
        mine = self._predicted_util(job) if learnt else None
        per_node = []
        for node in self.node_names:
            room = [
                k for k in self._node_gpus(node) if self._room(k, prof) and self._ends_ok(k, job)
            ]
            if learnt:
                scored = [(self._demand(k, mine), k) for k in room]
                room = [k for d, k in sorted(scored) if d <= 1.0 or d >= UNKNOWN]
            else:
                room.sort(key=lambda k: self.gpus[k].guaranteed is None)
            per_node.append(room)
            if len(room) >= job.gpus:
                return room[: job.gpus]
        if job.gpus > self.cl.gpus_per_node:
            flat = [k for room in per_node for k in room]
            if len(flat) >= job.gpus:
                return flat[: job.gpus]
        return None

    def _predicted_util(self: SharingSimulator, job: SimJob) -> float | None:
        """The job's solo utilisation as its kind's history has it (None: no history)."""
        if job.id in self._util_cache:
            return self._util_cache[job.id]
        self._util_cache[job.id] = None
        keys = kind_keys(self.trace[job.id])
        for kind in ("model", "name", "user"):
            if kind in keys:
                alone, _ = self.coloc_history.rows(kind, keys[kind])
                if alone is not None and alone.runs >= self.share.min_runs:
                    self._util_cache[job.id] = alone.util
                    break
        return self._util_cache[job.id]

    def _demand(self: SharingSimulator, k: GpuKey, mine: float | None) -> float:
        g = self.gpus[k]
        total = mine if mine is not None else UNKNOWN
        for j in ([g.guaranteed] if g.guaranteed else []) + g.opp:
            u = self._predicted_util(j)
            total += u if u is not None else UNKNOWN
        return total
