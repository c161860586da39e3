"""Tiresias' discretised queues, the running job's protection and the starvation guard.

A job's queue is its attained GPU service against `queue_thresholds_gpu_s` (stretched
for wide jobs by `queue_gpu_exponent`); STARVELIMIT lifts a job that waited a multiple of
its last stint back to queue 0, where the wait guard cannot judge it (policy/guards.py).
"""

from __future__ import annotations

import bisect

from slurm_ext.core.model import JobView
from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.gittins import GittinsTable
from slurm_ext.policy.guards import wait_judged, waited_since


def queue_scale(gpus: int, config: PolicyConfig) -> float:
    """How much the queue limits stretch for a job of `gpus` GPUs (`queue_gpu_exponent`)."""
    e = config.queue_gpu_exponent
    return gpus**e if e and gpus > 1 else 1.0


def queue_of(service_gpu_s: float, gpus: int, config: PolicyConfig) -> int:
    return bisect.bisect_right(
        config.queue_thresholds_gpu_s, service_gpu_s / queue_scale(gpus, config)
    )


def protected(job: JobView, config: PolicyConfig) -> bool:
    return job.running and job.last_run_s < config.min_run_s


def starved(job: JobView, now: float, config: PolicyConfig) -> bool:
    """The starvation limit alone: waited >= factor x its last stint (`starvation_lifts`)."""
    if job.running or config.starvation_factor <= 0 or job.last_run_s <= 0:
        return False
    return now - waited_since(job) >= config.starvation_factor * job.last_run_s


def starvation_lifts(
    job: JobView, now: float, config: PolicyConfig, table: GittinsTable | None = None
) -> bool:
    """Tiresias STARVELIMIT: waited >= factor x last run stint -> back to queue 0, for a
    job the wait guard cannot judge (`table`: the history's, None: no index). The service
    asks it of each waiting job's decision, the simulator when a job starts."""
    return starved(job, now, config) and not wait_judged(job, config, table)


def queue_service(job: JobView) -> float:
    """Service that places a job in a queue: since its promotion while that stint lasts."""
    if job.running and job.promoted_at_gpu_s is not None:
        return max(0.0, job.attained_gpu_s - job.promoted_at_gpu_s)
    return job.attained_gpu_s


def uses_queues(config: PolicyConfig) -> bool:
    return config.policy in ("gittins", "las")
