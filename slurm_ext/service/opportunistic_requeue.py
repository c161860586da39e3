"""The service's half of the opportunistic requeue rule: requeue a job that node agents
have kept paused longer than `max_pause_s`.

An agent freezes an opportunistic job when the guaranteed job beside it on a GPU slows
(AntMan-style). slurmctld does not see the freeze, so the job's time limit runs on and,
beside a long guaranteed job, it dies at its limit having done nothing. The agent cannot
requeue; the service can (`scontrol requeue`), and then the job queues again, from its
last checkpoint, with a fresh limit. The rule itself is `policy.opportunistic.overdue`,
the one the simulator applies (sim/coloc.py).

What the service trusts: the class comes from Slurm's QOS and partition through the
agent's own `colocation.classify` with the classes file the agents read too
(`slurm_ext.core.classes`), never from a report, so a guaranteed job is never requeued
whatever an agent says; only jobs that opted in to
requeue (`--requeue`) go. How long a job has been paused comes from its agents' latest
reports for its current stint, each measured on the agent's own clock (period_end -
paused_since, so clock skew between hosts does not count), and only from reports at most
`report_max_age_s` old: a stale report cannot say the job is still paused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from slurm_ext.core.config import positive
from slurm_ext.core.model import Job, JobClasses, JobState
from slurm_ext.core.reports import JobReport
from slurm_ext.policy import colocation as co
from slurm_ext.policy import overdue

log = logging.getLogger("slurm_ext.service.loop")


@dataclass
class OpportunisticSection:
    """`[opportunistic]` in service.toml. max_pause_s: requeue an opportunistic job its
    agents have kept paused this long (0: never; the default); which jobs are
    opportunistic, the classes file says (`classes_file`). report_max_age_s: older
    reports say nothing. max_per_pass: requeues per pass at most."""

    max_pause_s: float = 0.0
    report_max_age_s: float = positive(300.0)
    max_per_pass: int = 8

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_pause_s) and self.max_pause_s >= 0):
            raise ValueError("opportunistic.max_pause_s must be >= 0 (0: off)")
        if self.max_per_pass < 1:
            raise ValueError("opportunistic.max_per_pass must be >= 1")


def eligible(job: Job, classes: JobClasses) -> bool:
    """Running, opportunistic by Slurm's QOS/partition, and opted in to requeue."""
    return (
        job.state == JobState.RUNNING
        and job.requeue
        and co.classify(job.qos, job.partition, classes) == co.OPPORTUNISTIC
    )


def paused_for(
    job: Job, reports: Iterable[JobReport], now: float, cfg: OpportunisticSection
) -> float:
    """Seconds `job` has been paused by its agents' fresh reports on this stint (0: none
    says paused). Each node's latest report counts (an agent that restarted thawed the
    job and began a new period: its earlier period's last word is out of date); a job
    paused on any of its nodes makes no progress, so the longest pause counts. Skipped: final reports, other nodes', reports over `report_max_age_s` old or ahead of
    this clock (an agent's clock that far off is not believed), and reports from a stint
    before a requeue (begun `max_pause_s` or more before this stint started: a report of
    this stint begins after it started; one that ended a requeued stint paused that long
    began earlier). Skew between the hosts only ever makes a report count less."""
    latest: dict[str, JobReport] = {}
    for r in reports:
        if r.node not in latest or r.period_end > latest[r.node].period_end:
            latest[r.node] = r
    longest = 0.0
    for r in latest.values():
        if r.final or r.paused_since is None or r.node not in job.nodes:
            continue
        if abs(now - r.period_end) > cfg.report_max_age_s:
            continue  # stale (it may have resumed since), or from a clock far ahead
        if job.start_time is not None and (
            r.period_end < job.start_time or r.period_start <= job.start_time - cfg.max_pause_s
        ):
            continue  # from a stint before a requeue
        longest = max(longest, r.period_end - r.paused_since)
    return longest


def overdue_jobs(
    jobs: Sequence[Job],
    reports_of: Callable[[int], list[JobReport]],
    now: float,
    cfg: OpportunisticSection,
    classes: JobClasses,
) -> list[int]:
    """The eligible jobs paused for `cfg.max_pause_s` or longer, by `overdue` (sorted)."""
    if not cfg.max_pause_s > 0:
        return []
    since: dict[int, float] = {}
    for job in jobs:
        if not eligible(job, classes):
            continue
        held = paused_for(job, reports_of(job.job_id), now, cfg)
        if held > 0:
            since[job.job_id] = now - held
    return overdue(since, now, cfg.max_pause_s)


def requeue_overdue(
    jobs: Sequence[Job],
    reports_of: Callable[[int], list[JobReport]],
    now: float,
    cfg: OpportunisticSection,
    classes: JobClasses,
    requeue: Callable[[int], bool],
) -> list[int]:
    """Requeue the overdue jobs (at most `cfg.max_per_pass`) one `scontrol requeue` each;
    `requeue` says whether Slurm took it (a refusal is logged by it, retried next pass).
    Returns the jobs requeued."""
    done = []
    for job_id in overdue_jobs(jobs, reports_of, now, cfg, classes)[: cfg.max_per_pass]:
        if requeue(job_id):
            done.append(job_id)
            log.info(
                "requeued opportunistic job %d: paused by its agents for %.0f s or more",
                job_id,
                cfg.max_pause_s,
            )
    return done
