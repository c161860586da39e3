"""What Slurm recorded about the replay's jobs: sacct with slurmdbd, else squeue polls.

Both sources give, per job, its runs (one per start: a requeued job has several) with
wall-clock epoch seconds, the GPUs it held and its final state. The metrics are computed
from these alone, never from the replay's own clock.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

TERMINAL = {
    "COMPLETED", "TIMEOUT", "FAILED", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE",
}  # fmt: skip
RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"}
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


class RecordsError(RuntimeError):
    """Slurm's records could not be read."""


@dataclass
class JobRecord:
    job_id: int
    submit: float  # epoch seconds
    gpus: int
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) per run
    state: str = "PENDING"  # the last run's state
    requeues: int = 0

    @property
    def end(self) -> float | None:
        return self.runs[-1][1] if self.state in TERMINAL and self.runs else None


def _epoch(value: str) -> float | None:
    if value in ("", "Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(value).timestamp()


def parse_sacct(text: str, gpus: Mapping[int, int]) -> dict[int, JobRecord]:
    """`sacct -D -X -n -P -o JobIDRaw,State,Submit,Start,End,AllocTRES` rows (all runs of
    requeued jobs: each earlier run ends in state REQUEUED)."""
    out: dict[int, JobRecord] = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) < 6 or not f[0].isdigit():
            continue
        job_id = int(f[0])
        state = f[1].split()[0] if f[1] else ""  # "CANCELLED by 0"
        submit, start, end = _epoch(f[2]), _epoch(f[3]), _epoch(f[4])
        m = _GPU_TRES.search(f[5])
        rec = out.get(job_id)
        if rec is None:
            rec = out[job_id] = JobRecord(
                job_id, submit or 0.0, int(m.group(1)) if m else gpus.get(job_id, 0)
            )
        elif submit is not None:
            rec.submit = min(rec.submit, submit)
        if start is not None:
            rec.runs.append((start, end if end is not None else time.time()))
        if state == "REQUEUED":
            rec.requeues += 1
        rec.state = state
    for rec in out.values():
        rec.runs.sort()
    return out


def read_sacct(
    env: Mapping[str, str], job_ids: Iterable[int], since: float, gpus: Mapping[int, int]
) -> dict[int, JobRecord]:
    ids = sorted(job_ids)
    if not ids:
        return {}
    return parse_sacct(
        run_sacct(env, ids, since, "JobIDRaw,State,Submit,Start,End,AllocTRES"), gpus
    )


def run_sacct(env: Mapping[str, str], job_ids: Iterable[int], since: float, fields: str) -> str:
    """`sacct -P` of every run (requeues too: -D) of these jobs since an hour before
    `since`; RecordsError when sacct fails or does not answer within 60 s."""
    start = datetime.fromtimestamp(since - 3600).strftime("%Y-%m-%dT%H:%M:%S")
    argv = ["sacct", "-D", "-X", "-n", "-P", f"--starttime={start}", "--endtime=now"]
    argv += [f"--jobs={','.join(map(str, job_ids))}", f"--format={fields}"]
    try:
        res = subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RecordsError("sacct did not answer within 60 s") from exc
    if res.returncode != 0:
        raise RecordsError(f"sacct failed: {res.stderr.strip()}")
    return res.stdout


class SqueuePoller:
    """The fallback without accounting: polls squeue and builds runs from what it sees.

    A run starts at squeue's StartTime and ends at its EndTime once the job leaves the
    running states; a running job seen pending again was requeued. Resolution is the poll
    interval for requeues; start and end times are Slurm's own."""

    FORMAT = "%i|%T|%V|%S|%e"

    def __init__(self, gpus: Mapping[int, int]) -> None:
        self.gpus = dict(gpus)
        self.records: dict[int, JobRecord] = {}
        self._open: dict[int, float] = {}  # job -> start of the run in progress

    def update(self, text: str, now: float) -> None:
        for line in text.splitlines():
            f = line.strip().split("|")
            if len(f) < 5 or not f[0].isdigit():
                continue
            job_id, state = int(f[0]), f[1]
            rec = self.records.get(job_id)
            if rec is None:
                rec = self.records[job_id] = JobRecord(
                    job_id, _epoch(f[2]) or now, self.gpus.get(job_id, 0)
                )
            start, end = _epoch(f[3]), _epoch(f[4])
            if state in RUNNING:
                if job_id not in self._open:
                    self._open[job_id] = start or now
            elif job_id in self._open:
                began = self._open.pop(job_id)
                rec.runs.append((began, end if end and end >= began else now))
                if state not in TERMINAL:
                    rec.requeues += 1
            elif state in TERMINAL and not rec.runs and start is not None:
                rec.runs.append((start, end if end and end >= start else now))  # ran between polls
            rec.state = state
