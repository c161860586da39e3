"""Attained-service records of Slurm jobs, advanced pass by pass from Slurm's snapshots.

Pure functions: the service folds each snapshot into the records its store keeps, and
the accounting of a stint's GPU-seconds is `slurm_ext.attained`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from slurm_ext import attained
from slurm_ext.hints import parse_hints
from slurm_ext.model import Job, JobState
from slurm_ext.store import JobRecord

TERMINAL = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
)


def fold_jobs(
    records: dict[int, JobRecord],
    jobs: Sequence[Job],
    now: float,
    promoted: Collection[int] = (),
) -> tuple[dict[int, JobRecord], list[tuple[int, float, float, float]]]:
    """Advance attained-service records with a fresh snapshot.

    `promoted`: jobs the starvation guard had promoted while they waited; a stint one of
    them starts counts its queue from the service it had then (as the simulator does).

    Returns the updated records (done ones included, marked) and completions
    (job_id, gpu_s, run_s, end_time) for the Gittins history. A stint's start is
    Slurm's StartTime, so a service restart loses nothing of a running stint; each part
    of a stint is charged at the GPUs it held (slurm_ext.attained), and a job that ran
    and ended between two passes is charged from Slurm's StartTime and EndTime.

    A job is its id and its submit time: an id Slurm hands out again (after its state
    was reset) starts a new record, and the old one is closed as gone.
    """
    out: dict[int, JobRecord] = {}
    completions: list[tuple[int, float, float, float]] = []
    seen: set[int] = set()
    for job in jobs:
        seen.add(job.job_id)
        prev = records.get(job.job_id)
        if prev is not None and reused_id(prev, job):
            completions += _retire(prev, out)
            prev = None
        if prev is not None and prev.done:
            continue
        if prev is None:
            prev = JobRecord(
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
        gpus = job.gpus or prev.gpus
        closed_gpu, closed_run, last_run = prev.closed_gpu_s, prev.closed_run_s, prev.last_run_s
        stint, waiting = prev.stint, prev.waiting_since
        promoted_at = prev.promoted_at_gpu_s
        state = job.state
        terminal = state.value in TERMINAL

        def close(end: float) -> None:
            nonlocal closed_gpu, closed_run, last_run, stint, promoted_at
            assert stint is not None
            closed_gpu, closed_run, last_run = attained.close(closed_gpu, closed_run, stint, end)
            stint = None
            promoted_at = None

        if _requeue_completing(job, stint, prev.state):
            # just requeued: its old stint ends at the StartTime Slurm stamped on the
            # requeue; it waits from there (not a restart, as the simulator has it)
            if stint is not None:  # seen completing twice: closed the first time
                assert job.start_time is not None
                close(max(job.start_time, stint.start))
                waiting = job.start_time
        elif state in (JobState.RUNNING, JobState.COMPLETING):
            start = job.start_time or now
            if stint is None:
                # fresh start (Slurm's StartTime is exact) or resume from suspend (now)
                stint = attained.Stint.begin(start if prev.state != "SUSPENDED" else now, gpus)
                waiting = None
                if job.job_id in promoted and prev.state != "SUSPENDED":
                    promoted_at = closed_gpu
            elif start > stint.start + 1 and prev.state != "SUSPENDED":
                # requeued and restarted between two passes: close the old stint
                close(min(prev.last_seen, start))
                stint, waiting = attained.Stint.begin(start, gpus), None
            else:
                stint = stint.resized(gpus, prev.last_seen, now)
        elif stint is not None:
            if terminal:
                close(job.end_time or prev.last_seen)
            elif state == JobState.SUSPENDED:
                close(now)
            else:  # back to pending: requeued or preempted
                close(prev.last_seen)
                waiting = now
        elif terminal and prev.state == "PENDING" and _ran_unseen(job, waiting):
            # started and ended between two passes (or while the store was failing)
            assert job.start_time is not None
            stint = attained.Stint.begin(job.start_time, gpus)
            close(job.end_time or now)
        if terminal and closed_gpu > 0:
            completions.append((job.job_id, closed_gpu, closed_run, job.end_time or now))
        out[job.job_id] = JobRecord(
            job_id=prev.job_id,
            user=prev.user,
            partition=job.partition,
            name=prev.name,
            model_tag=prev.model_tag,
            gpus=gpus,
            submit_time=prev.submit_time,
            closed_gpu_s=closed_gpu,
            closed_run_s=closed_run,
            last_run_s=last_run,
            run_start=stint.start if stint else None,
            waiting_since=waiting,
            last_seen=now,
            state=state.value,
            done=terminal,
            promoted_at_gpu_s=promoted_at,
            open_gpu_s=stint.earlier_gpu_s if stint else 0.0,
            seg_start=stint.seg_start if stint and stint.seg_start != stint.start else None,
        )
    for job_id, rec in records.items():
        if job_id in seen or rec.done:
            continue
        # gone from Slurm (purged after MinJobAge, or finished while we were down)
        completions += _retire(rec, out)
    return out, completions


def reused_id(rec: JobRecord, job: Job) -> bool:
    """Is `job` another job than the one `rec` records under the same id?

    Slurm reuses ids after its state is reset. A requeue moves a job's SubmitTime too,
    but also counts up its restarts; a job not yet requeued under a moved SubmitTime is a
    new one. Where Slurm does not say how often it restarted, the record is kept (a user
    must never be able to shed recorded service)."""
    if not rec.submit_time or not job.submit_time or abs(job.submit_time - rec.submit_time) <= 1:
        return False
    return job.restart_count == 0


def _requeue_completing(job: Job, stint: attained.Stint | None, prev_state: str) -> bool:
    """A running job Slurm has just requeued: COMPLETING (its old step still ending), with
    StartTime moved to the requeue instant (squeue --json, 22.05 and 25.11). Read as a
    fresh start it made a stint of a few tenths of a second, which became its last run:
    the starvation guard then promoted it after 160 x that instead of 160 x its real run,
    and the live service requeued others for it (issue 13, the requeue thrash)."""
    if job.state != JobState.COMPLETING or prev_state == "SUSPENDED":
        return False
    if stint is None:  # a later pass of the same completion: it waits already
        return prev_state == "COMPLETING"
    return job.start_time is not None and job.start_time > stint.start


def _ran_unseen(job: Job, waiting_since: float | None) -> bool:
    """A terminal job Slurm says ran, that no pass saw running since it last waited."""
    start, end = job.start_time, job.end_time
    if not start or not end or end <= start:
        return False
    return waiting_since is None or start >= waiting_since - 1


def _retire(rec: JobRecord, out: dict[int, JobRecord]) -> list[tuple[int, float, float, float]]:
    """Mark a record gone (its job left Slurm, or its id was reused); its completion."""
    if rec.done:
        return []
    if rec.run_start is not None:
        rec = _close(rec, rec.last_seen)
    out[rec.job_id] = replace(rec, done=True, state="GONE")
    if rec.closed_gpu_s > 0:
        return [(rec.job_id, rec.closed_gpu_s, rec.closed_run_s, rec.last_seen)]
    return []


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


def _close(rec: JobRecord, end: float) -> JobRecord:
    stint = rec.stint
    assert stint is not None
    gpu_s, run_s, last = attained.close(rec.closed_gpu_s, rec.closed_run_s, stint, end)
    return replace(
        rec,
        closed_gpu_s=gpu_s,
        closed_run_s=run_s,
        last_run_s=last,
        run_start=None,
        promoted_at_gpu_s=None,
        open_gpu_s=0.0,
        seg_start=None,
    )
