"""Attained-service records of Slurm jobs, advanced pass by pass from Slurm's snapshots.

Pure functions: the service folds each snapshot into the records its store keeps. What
a job has received is `slurm_ext.core.attained.Attained` (closed stints, the open one, a
promotion); this module decides, from what Slurm says of a job now and what the last
pass saw, which stint opens, closes or changes its GPU count.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from slurm_ext.core.attained import Attained, Stint
from slurm_ext.core.hints import parse_hints
from slurm_ext.core.model import Job, JobState
from slurm_ext.store.rows import JobRecord

TERMINAL = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
)
_RUNNING = (JobState.RUNNING, JobState.COMPLETING)
# a completion for the Gittins history: (job_id, GPU-s, run s, end time)
Completion = tuple[int, float, float, float]


@dataclass
class Fold:
    """One snapshot folded into the records: the records (done ones included, marked),
    completions for the Gittins history, and the jobs whose record changed beyond being
    seen again (the only ones a store needs to write)."""

    records: dict[int, JobRecord] = field(default_factory=dict)
    completions: list[Completion] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)


def fold_jobs(
    records: dict[int, JobRecord],
    jobs: Sequence[Job],
    now: float,
    promoted: Collection[int] = (),
) -> tuple[dict[int, JobRecord], list[Completion]]:
    """`fold` as (records, completions)."""
    f = fold(records, jobs, now, promoted)
    return f.records, f.completions


def fold(
    records: dict[int, JobRecord],
    jobs: Sequence[Job],
    now: float,
    promoted: Collection[int] = (),
) -> Fold:
    """Advance attained-service records with a fresh snapshot.

    `promoted`: jobs the starvation guard had promoted while they waited; a stint one of
    them starts counts its queue from the service it had then (as the simulator does).

    A stint's start is Slurm's StartTime, so a service restart loses nothing of a running
    stint; each part of a stint is charged at the GPUs it held (slurm_ext.core.attained), and
    a job that ran and ended between two passes is charged from Slurm's StartTime and
    EndTime. A job is its id and its submit time: an id Slurm hands out again (after its
    state was reset) starts a new record, and the old one is closed as gone.
    """
    out = Fold()
    for job in jobs:
        prev = records.get(job.job_id)
        if prev is not None:
            if unchanged(prev, job):
                out.records[job.job_id] = prev.seen(now)
                continue
            if reused_id(prev, job):
                _retire(prev, out)
                prev = None
            elif prev.done:
                continue
        rec, completion = advance(
            prev if prev is not None else new_record(job, now),
            job,
            now,
            job.job_id in promoted,
        )
        out.records[job.job_id] = rec
        out.changed.append(job.job_id)
        if completion is not None:
            out.completions.append(completion)
    for job_id, rec in records.items():
        if job_id not in out.records and not rec.done:
            # gone from Slurm (purged after MinJobAge, or finished while we were down)
            _retire(rec, out)
    return out


def unchanged(prev: JobRecord, job: Job) -> bool:
    """Would this pass change nothing of `prev` but when it was last seen? True for most
    jobs of most passes: same state, GPUs and partition, and a running job still in the
    stint it was in."""
    if (
        prev.done
        or job.state != prev.state  # JobState is a str enum: compares with the stored name
        or job.partition != prev.partition
        or (job.gpus or prev.gpus) != prev.gpus
        or reused_id(prev, job)
    ):
        return False
    if job.state in _RUNNING:
        start = job.start_time
        return prev.run_start is not None and start is not None and start <= prev.run_start + 1
    return prev.run_start is None and job.state not in TERMINAL


def new_record(job: Job, now: float) -> JobRecord:
    """The record of a job no pass has seen: nothing attained, waiting since its submit."""
    return JobRecord(
        job_id=job.job_id,
        user=job.user,
        partition=job.partition,
        name=job.name,
        model_tag=parse_hints(job.comment).model,
        gpus=job.gpus,
        submit_time=job.submit_time,
        closed_gpu_s=0.0,
        closed_run_s=0.0,
        last_run_s=0.0,
        run_start=None,
        waiting_since=job.submit_time or now,
        last_seen=now,
        state="PENDING",
        done=False,
    )


def advance(
    prev: JobRecord, job: Job, now: float, promoted: bool
) -> tuple[JobRecord, Completion | None]:
    """`prev` after a pass at `now` saw `job`; the job's completion when it ended."""
    gpus = job.gpus or prev.gpus
    terminal = job.state.value in TERMINAL
    service, waiting = next_service(prev, job, gpus, now, promoted, terminal)
    completion = None
    # a run Slurm timed at 0 s (start and end in the same second) is a completion too:
    # dropping it left the shortest jobs out of the Gittins history
    ran = prev.run_start is not None or (prev.state == "PENDING" and _ran_unseen(job, waiting))
    if terminal and (service.closed_gpu_s > 0 or ran):
        completion = (job.job_id, service.closed_gpu_s, service.closed_run_s, job.end_time or now)
    rec = prev.with_attained(
        service,
        partition=job.partition,
        gpus=gpus,
        waiting_since=waiting,
        last_seen=now,
        state=job.state.value,
        done=terminal,
    )
    return rec, completion


def next_service(
    prev: JobRecord, job: Job, gpus: int, now: float, promoted: bool, terminal: bool
) -> tuple[Attained, float | None]:
    """The job's attained service and since when it waits, after this pass."""
    service, waiting = prev.attained, prev.waiting_since
    stint = service.stint
    resumed = prev.state == "SUSPENDED"
    if _requeue_completing(job, stint, prev.state):
        # just requeued: its old stint ends at the StartTime Slurm stamped on the requeue;
        # it waits from there (not a restart, as the simulator has it)
        if stint is None:  # seen completing twice: closed the first time
            return service, waiting
        assert job.start_time is not None
        return service.closed(max(job.start_time, stint.start)), job.start_time
    if job.state in _RUNNING:
        start = job.start_time or now
        if stint is None:
            # fresh start (Slurm's StartTime is exact) or resume from suspend (now)
            return service.started(now if resumed else start, gpus, promoted and not resumed), None
        if start > stint.start + 1 and not resumed:
            # requeued and restarted between two passes: close the old stint
            return service.closed(min(prev.last_seen, start)).started(start, gpus), None
        return service.resized(gpus, prev.last_seen, now), waiting
    if stint is not None:
        if terminal:
            return service.closed(job.end_time or prev.last_seen), waiting
        if job.state == JobState.SUSPENDED:
            return service.closed(now), waiting
        return service.closed(prev.last_seen), now  # back to pending: requeued or preempted
    if terminal and prev.state == "PENDING" and _ran_unseen(job, waiting):
        # started and ended between two passes (or while the store was failing)
        assert job.start_time is not None
        return service.started(job.start_time, gpus).closed(job.end_time or now), waiting
    return service, waiting


def reused_id(rec: JobRecord, job: Job) -> bool:
    """Is `job` another job than the one `rec` records under the same id?

    Slurm reuses ids after its state is reset. A requeue moves a job's SubmitTime too,
    but also counts up its restarts; a job not yet requeued under a moved SubmitTime is a
    new one. Where Slurm does not say how often it restarted, the record is kept (a user
    must never be able to shed recorded service)."""
    if not rec.submit_time or not job.submit_time or abs(job.submit_time - rec.submit_time) <= 1:
        return False
    return job.restart_count == 0


def _requeue_completing(job: Job, stint: Stint | None, prev_state: str) -> bool:
    """A running job Slurm has just requeued: COMPLETING (its old step still ending), with
    StartTime moved to the requeue instant (squeue --json, 22.05 and 25.11). Read as a
    fresh start it made a stint of a few tenths of a second, which became its last run:
    the starvation guard then promoted it after 160 x that instead of 160 x its real run,
    and the live service requeued others for it, pass after pass (a requeue thrash)."""
    if job.state != JobState.COMPLETING or prev_state == "SUSPENDED":
        return False
    if stint is None:  # a later pass of the same completion: it waits already
        return prev_state == "COMPLETING"
    return job.start_time is not None and job.start_time > stint.start


def _ran_unseen(job: Job, waiting_since: float | None) -> bool:
    """A terminal job Slurm says ran, that no pass saw running since it last waited.
    Slurm's times are whole seconds, so a run under a second may end in the second it
    started; a job cancelled while pending has both stamped with the cancel, and did not run."""
    start, end = job.start_time, job.end_time
    if not start or not end or end < start:
        return False
    if end == start and job.state == JobState.CANCELLED:
        return False
    return waiting_since is None or start >= waiting_since - 1


def _retire(rec: JobRecord, out: Fold) -> None:
    """Mark a record gone (its job left Slurm, or its id was reused); its completion."""
    if rec.done:
        return
    service = rec.attained.closed(rec.last_seen)
    out.records[rec.job_id] = rec.with_attained(service, done=True, state="GONE")
    out.changed.append(rec.job_id)
    if service.closed_gpu_s > 0:
        out.completions.append(
            (rec.job_id, service.closed_gpu_s, service.closed_run_s, rec.last_seen)
        )


def persisted_fields(rec: JobRecord | None) -> tuple | None:
    """The fields a pass can change, but last_seen (bumped every pass, not persisted each time)."""
    if rec is None:
        return None
    return (
        rec.state,
        rec.run_start,
        rec.waiting_since,
        rec.closed_gpu_s,
        rec.gpus,
        rec.partition,
        rec.done,
        rec.promoted_at_gpu_s,
        rec.open_gpu_s,
        rec.seg_start,
    )
