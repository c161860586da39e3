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
from slurm_ext.policy.guards import wait_judged


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


def starved(
    running: bool,
    last_run_s: float,
    waiting_since: float | None,
    submit_time: float,
    now: float,
    config: PolicyConfig,
) -> bool:
    """The starvation limit alone: waited >= factor x its last stint (`starvation_lifts`)."""
    if running or config.starvation_factor <= 0 or last_run_s <= 0:
        return False
    since = waiting_since if waiting_since is not None else submit_time
    return now - since >= config.starvation_factor * last_run_s


def starvation_lifts(
    config: PolicyConfig,
    table: GittinsTable | None,
    now: float,
    running: bool,
    last_run_s: float,
    waiting_since: float | None,
    submit_time: float,
    gpus: int,
    attained_gpu_s: float,
    user: str = "",
    job_name: str = "",
    account: str = "",
    time_limit_s: float | None = None,
) -> bool:
    """Tiresias STARVELIMIT: waited >= factor x last run stint -> back to queue 0, for a
    job the wait guard cannot judge (`table`: the history's, None: no index). From the job's numbers: the service passes its view's
    (`promoted`), the simulator its own when a job starts."""
    if not starved(running, last_run_s, waiting_since, submit_time, now, config):
        return False
    return not wait_judged(
        config, table, gpus, attained_gpu_s, user, job_name, account, time_limit_s
    )


def promoted(
    job: JobView, now: float, config: PolicyConfig, table: GittinsTable | None = None
) -> bool:
    """`starvation_lifts` for a job's view."""
    return starvation_lifts(
        config, table, now, job.running, job.last_run_s, job.waiting_since, job.submit_time,
        job.gpus, job.attained_gpu_s, job.user, job.job_name, job.account, job.time_limit_s,
    )  # fmt: skip


def queue_service(job: JobView) -> float:
    """Service that places a job in a queue: since its promotion while that stint lasts."""
    if job.running and job.promoted_at_gpu_s is not None:
        return max(0.0, job.attained_gpu_s - job.promoted_at_gpu_s)
    return job.attained_gpu_s


def uses_queues(config: PolicyConfig) -> bool:
    return config.policy in ("gittins", "las")
