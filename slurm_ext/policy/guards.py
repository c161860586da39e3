"""The guards' pure pieces: when the wait guard lifts a waiting job, and how long a
stint a guard started keeps the guard's rank (`wait_guard_keep`).

`ranking.key_and_change` reads them for every key; the simulator asks `wait_guarded`
when a job starts, the service `starts_promoted` after each pass (its next fold marks
the stints they start: `promoted_at_gpu_s`), so both shells mark the same stints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_ext.core.model import Decision, JobView
from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.gittins import GittinsTable

# the score of a job the wait guard lifted: ahead of any Gittins index
GUARDED = -math.inf


def own_table(job: JobView, table: GittinsTable) -> GittinsTable:
    """The table a job's Gittins index reads: its kind's (policy/kinds.py), its GPU
    class's, or the pooled one."""
    if table.kinds is not None:
        c = table.kinds.choose(job.gpus, job.user, job.job_name, job.account, job.time_limit_s)
        return c.pick(job.attained_gpu_s)
    if table.classes is not None:
        return table.for_gpus(job.gpus)
    return table


def _own_index(job: JobView, table: GittinsTable | None) -> float:
    """The job's Gittins index from its `own_table` (0: no history, or no GPUs), as the
    guards scale its wait by it."""
    if table is None or not table.samples or job.gpus <= 0:
        return 0.0
    return own_table(job, table).step(job.attained_gpu_s)[0]


def guard_promotes(config: PolicyConfig) -> bool:
    """Whether the wait guard lifts jobs ahead of everyone (gittins, the guard on)."""
    return config.policy == "gittins" and config.wait_guard_factor > 0


def kept_guard_s(job: JobView, own: GittinsTable, config: PolicyConfig) -> float:
    """Seconds a running job whose stint a guard started keeps the guard's rank (<= 0:
    no longer): `wait_guard_keep` x its predicted run at the stint's start (1 / index,
    GPU-seconds over its GPUs, the wait guard's own unit) less what the stint has run.
    Without it the job is judged by its index alone the moment it starts and the next
    guarded job requeues it after `min_run_s` (the requeue thrash); Tiresias' promotion
    likewise holds for the stint it starts. `own`: the job's `own_table`; a job no guard
    promoted (`promoted_at_gpu_s` None) keeps nothing."""
    gpus, promoted_at = job.gpus, job.promoted_at_gpu_s
    if promoted_at is None or not guard_promotes(config) or gpus <= 0:
        return 0.0
    index = own.step(promoted_at)[0]
    if index <= 0.0:
        return 0.0
    ran = (job.attained_gpu_s - promoted_at) / gpus
    return config.wait_guard_keep / (index * gpus) - ran


def wait_judged(job: JobView, config: PolicyConfig, table: GittinsTable | None) -> bool:
    """Whether the wait guard bounds this job's wait, so that the starvation guard leaves
    it alone: gittins with the wait guard on and a positive index for the job
    (`own_table`). A job that outlived every completion its table holds reads index 0,
    which the wait guard cannot scale: the starvation guard stays its backstop. Two
    guards on one requeued job lifted long jobs twice under a sustained backlog and the
    order turned first come, first served (long runs of 10,000-30,000 jobs)."""
    if not guard_promotes(config):
        return False
    return _own_index(job, table) > 0


def waited_since(job: JobView) -> float:
    """When the job's current wait began: when it last became pending, else its submit."""
    return job.waiting_since if job.waiting_since is not None else job.submit_time


def wait_guarded(
    job: JobView, now: float, config: PolicyConfig, table: GittinsTable | None
) -> bool:
    """Whether the wait guard lifts a waiting job now: it has waited (`waited_since`)
    >= `wait_guard_factor` x its predicted run (as `key_and_change` decides)."""
    if not guard_promotes(config):
        return False
    return guard_deadline(job, config, table) - now <= 0.0


def guard_deadline(job: JobView, config: PolicyConfig, table: GittinsTable | None) -> float:
    """The moment the wait guard becomes due for a waiting job: `waited_since` +
    `wait_guard_factor` x its predicted run (inf: no index to scale its wait by)."""
    index = _own_index(job, table)
    if index <= 0 or config.wait_guard_factor <= 0:
        return math.inf
    return waited_since(job) + config.wait_guard_factor / (index * job.gpus)


def lifted(
    job: JobView, score: float, now: float, config: PolicyConfig, table: GittinsTable | None
) -> bool:
    """`Decision.guarded`: the wait guard lifts this waiting job now. `score`: its key's
    (GUARDED unless composed with fair-share, which maps the guard to a site factor)."""
    if job.running:
        return False
    if score == GUARDED:
        return True
    if config.fairshare_site_weight <= 0:
        return False
    return wait_guarded(job, now, config, table)


def starts_promoted(decisions: Sequence[Decision], config: PolicyConfig) -> set[int]:
    """The waiting jobs whose next stint a guard starts: promoted by the starvation guard,
    or lifted by the wait guard when stints keep it (`wait_guard_keep`). The service
    passes them to the next fold (`records.fold`), as the simulator decides at a start."""
    keep = config.wait_guard_keep > 0
    return {d.job_id for d in decisions if d.promoted or (keep and d.guarded)}
