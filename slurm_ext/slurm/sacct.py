"""`sacct --parsable2` output -> CompletedJob records: one pure parser.

The service's Gittins history (through `CliSlurmClient.completed_jobs`) and the
simulator's sacct trace reader (`sim/traces.py`) both read sacct through it, so a site's
history means the same thing to both. Text in, records out: no subprocess, no files.

What counts: one row per job allocation (steps such as `123.batch` or `123.0` repeat
their job and are left out), GPU jobs only (a `gres/gpu` count in AllocTRES or ReqTRES,
as 22.05 and 25.11 both write it), and only jobs that ran (Start is a time before End; a
job cancelled while pending has no AllocTRES, or Start = End, depending on the release). Times
are sacct's local ISO times, read in this host's time zone as sacct wrote them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from slurm_ext.core.model import CompletedJob

# What the service asks for; the trace reader accepts any superset or reordering.
SACCT_FIELDS = (
    "JobIDRaw", "Submit", "Start", "End", "AllocTRES", "User", "Partition", "JobName",
    "Account", "Timelimit",
)  # fmt: skip
ENDED_STATES = "CD,F,TO,CA,OOM,NF"  # completed, failed, timeout, cancelled, OOM, node fail
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_NOT_A_TIME = ("Unknown", "None", "")


def sacct_argv(since: float) -> list[str]:
    """The sacct command for allocations of every user that ended since `since` (unix s).

    `--endtime=now` is needed: with `--state` and no end time, sacct ends the window at
    its start and finds nothing (22.05 and 25.11 alike)."""
    start = datetime.fromtimestamp(since).strftime("%Y-%m-%dT%H:%M:%S")
    return [
        "sacct", "--allusers", "--allocations", "--parsable2", "--noconvert",
        f"--format={','.join(SACCT_FIELDS)}", f"--starttime={start}", "--endtime=now",
        f"--state={ENDED_STATES}",
    ]  # fmt: skip


@dataclass(frozen=True)
class Columns:
    """Where each field sits in a sacct header line."""

    index: dict[str, int]
    job_id: str  # JobIDRaw, else JobID
    tres: str  # AllocTRES, else ReqTRES

    def get(self, fields: list[str], name: str, default: str = "") -> str:
        i = self.index.get(name)
        return fields[i] if i is not None else default


def parse_header(line: str) -> Columns:
    """The header of `sacct --parsable2`; ValueError naming the columns it lacks."""
    names = line.rstrip("\r\n").split("|")
    index = {name: i for i, name in enumerate(names)}
    job_id = "JobIDRaw" if "JobIDRaw" in index else "JobID"
    tres = next((c for c in ("AllocTRES", "ReqTRES") if c in index), None)
    missing = [c for c in (job_id, "Submit", "Start", "End") if c not in index]
    if missing or tres is None:
        raise ValueError(f"missing columns {', '.join(missing or ['AllocTRES'])}")
    return Columns(index, job_id, tres)


def parse_row(cols: Columns, line: str) -> CompletedJob | None:
    """One data line: its job, or None for a line that is no GPU job that ran (a step, a
    CPU-only job, one cancelled before it started or as it started, a blank line). ValueError says what
    is wrong with a malformed one."""
    if not line.strip():
        return None
    f = line.rstrip("\r\n").split("|")
    if len(f) != len(cols.index):
        raise ValueError(f"expected {len(cols.index)} fields, got {len(f)}")
    raw_id = f[cols.index[cols.job_id]]
    if "." in raw_id:
        return None  # job steps (123.batch, 123.0) repeat their job
    m = _GPU_TRES.search(f[cols.index[cols.tres]])
    if not m or int(m.group(1)) == 0:
        return None  # not a GPU job
    if f[cols.index["Start"]] in _NOT_A_TIME:
        return None  # never ran
    start = sacct_time(f[cols.index["Start"]], "Start")
    end = sacct_time(f[cols.index["End"]], "End")
    if end < start:
        raise ValueError(f"End before Start ({end - start:.0f} s)")
    if end == start:
        return None  # ran no time (cancelled as it started): nothing to count
    limit = cols.get(f, "Timelimit")
    return CompletedJob(
        job_id=int(raw_id.split("_")[0]),
        gpus=int(m.group(1)),
        submit_time=sacct_time(f[cols.index["Submit"]], "Submit"),
        start_time=start,
        end_time=end,
        user=cols.get(f, "User"),
        partition=cols.get(f, "Partition"),
        name=cols.get(f, "JobName"),
        account=cols.get(f, "Account"),
        time_limit_s=slurm_time_s(limit) if limit else None,
        comment=cols.get(f, "Comment"),
    )


def parse_sacct(text: str) -> tuple[list[CompletedJob], list[str]]:
    """A whole `sacct --parsable2` output (header first): its GPU jobs that ran, and a
    message per malformed line ("line N: ..."), which is left out, never fatal."""
    lines = text.splitlines()
    if not lines:
        return [], []
    cols = parse_header(lines[0])
    jobs: list[CompletedJob] = []
    problems: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            job = parse_row(cols, line)
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if job is not None:
            jobs.append(job)
    return jobs, problems


def sacct_time(value: str, column: str = "time") -> float:
    """A sacct time (local ISO 8601, `2026-11-01T10:05:00`) in unix seconds."""
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ValueError(f"{column}: not a time: {value[:40]!r}") from None


def slurm_time_s(value: str, what: str = "Timelimit") -> float | None:
    """A Slurm time limit in seconds; None for UNLIMITED / Partition_Limit / empty.

    Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS. `what` names the
    field in the error."""
    v = value.strip()
    if v in ("", "UNLIMITED", "INFINITE", "Partition_Limit", "NONE", "None"):
        return None
    m = _SLURM_TIME.fullmatch(v) if len(v) <= 32 else None
    if m is None:
        raise ValueError(f"{what}: expected [D-]HH:MM:SS, MM:SS or MM, got {value[:40]!r}")
    d, a, b, c = m.groups()
    if d is not None:  # D-HH[:MM[:SS]]
        secs = int(d) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # HH:MM:SS
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    else:  # MM[:SS]
        secs = int(a) * 60 + int(b or 0)
    if secs <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return float(secs)
