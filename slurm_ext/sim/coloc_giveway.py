"""Which shards the co-location simulator offers an opportunistic job, by the rules of
`policy.opportunistic` (`shard_offered`: `ends_before`, `after_requeue`). The other half
of giving way, requeueing a job paused past `ShareConfig.max_pause_s` (what the service
does with `scontrol requeue`), is the simulator's own (`SharingSimulator._requeue_paused`):
it moves the job between the engine's queues."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_ext.policy import opportunistic as opp_rules
from slurm_ext.sim.coloc_model import Gpu, ShareConfig
from slurm_ext.sim.simjob import SimJob


def shard_offered_on(
    gpu: Gpu, job: SimJob, share: ShareConfig, paused_by: Mapping[int, set[int]], now: float
) -> bool:
    """`opportunistic.shard_offered` for a shard of `gpu`: `ends_before` for every job,
    and what a requeued job avoids (`after_requeue`; `paused_by`: requeued job id -> the
    guaranteed jobs that paused it); idle GPUs are always offered."""
    g = gpu.guaranteed
    if g is None or not (share.ends_before or share.after_requeue != "any"):
        return True
    end = g.start + g.limit if g.limit is not None and g.start is not None else None
    by = paused_by.get(job.id)
    return opp_rules.shard_offered(
        g.id,
        end,
        now,
        job.limit,
        paused_by=by or (),
        requeued=by is not None,
        ends_first=share.ends_before,
        after_requeue=share.after_requeue,
    )
