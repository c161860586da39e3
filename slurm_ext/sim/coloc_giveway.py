"""How `SharingSimulator`'s opportunistic jobs give way, by the rules of
`policy.opportunistic`: requeued once paused past `ShareConfig.max_pause_s` (what the
service does with `scontrol requeue`), and which shards a job is offered (`ends_before`,
`after_requeue`). A mixin, as sim/coloc_agents.py is, so sim/coloc.py keeps the engine
hooks and placement."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from slurm_ext.policy import opportunistic as opp_rules
from slurm_ext.sim.coloc_model import GpuKey
from slurm_ext.sim.engine import Simulator
from slurm_ext.sim.simjob import SimJob

if TYPE_CHECKING:
    from slurm_ext.sim.coloc import SharingSimulator


class GiveWay:
    """Mixin of `SharingSimulator`."""

    def _requeue_paused(self: SharingSimulator, job: SimJob, now: float) -> None:
        """What the service does to a job paused past the bound: `scontrol requeue`. It
        leaves its shard, keeps the work up to its last checkpoint and queues again (for
        shards, and whole GPUs too with `whole_gpus`), its time limit starting afresh."""
        self._advance(now)
        done = min(job.duration, self._progress(job, now))
        ck = self.cl.checkpoint_interval_s
        by = self.paused_by.setdefault(job.id, set())
        by.update(g.id for k in self.placed.get(job, ()) if (g := self.gpus[k].guaranteed))
        self._leave(job, now)
        self.on_shards.discard(job)
        self.paused_since.pop(job.id, None)
        job.progress = (done // ck) * ck if ck > 0 else done
        job.running = False
        job.run_ver += 1
        job.key_ver += 1
        self.opp_requeues += 1
        heapq.heappush(self.opp_queue, (job.submit, job.id, job))
        if self.share.whole_gpus:
            self.n_pending += 1
            self.pending_ver += 1
            self.bf_changed = True
            Simulator._rekey(self, job, now)  # the engine's queue
        self._touch(())

    def _ends_ok(self: SharingSimulator, k: GpuKey, job: SimJob) -> bool:
        """`opportunistic.shard_offered`: `ends_before` for every job, and what a requeued
        job avoids (`after_requeue`); idle GPUs are always offered."""
        g = self.gpus[k].guaranteed
        share = self.share
        if g is None or not (share.ends_before or share.after_requeue != "any"):
            return True
        end = g.start + g.limit if g.limit is not None and g.start is not None else None
        by = self.paused_by.get(job.id)
        return opp_rules.shard_offered(
            g.id,
            end,
            self.t_last,
            job.limit,
            paused_by=by or (),
            requeued=by is not None,
            ends_first=share.ends_before,
            after_requeue=share.after_requeue,
        )
