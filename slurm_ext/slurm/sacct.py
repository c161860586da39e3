"""`sacct --parsable2` output -> CompletedJob records: one pure parser.

The service's Gittins history (through `CliSlurmClient.completed_jobs`) and the
simulator's sacct trace reader (`sim/traces.py`) both read sacct through it, so a site's
history means the same thing to both. Text in, records out: no subprocess, no files.

What counts: one row per job allocation (steps such as `123.batch`, `123.extern` or
`123.0` repeat their job and are left out), GPU jobs only (a `gres/gpu` count in
AllocTRES or ReqTRES, as 22.05 and 25.11 both write it), and only jobs that ran (Start is
a time before End; a job cancelled while pending has no AllocTRES, or Start = End,
depending on the release). Times are sacct's local ISO times, read in this host's time
zone as sacct wrote them. `read_row` says why a row is left out (`LEFT_OUT`).

Job ids: JobIDRaw when the export has it (every array task has its own raw id there);
JobID gives the array job and task (`1234_7`). An export with JobID only names an array
task by its array job, so each task gets `array_task_job_id(1234, 7)`, an id above any
Slurm job id (those are 32-bit): stable, one per task, never a real job's.
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
# What a trace export should ask for (docs/simulator.md): the above, and how Slurm
# describes the job (array task, QOS, state, features).
TRACE_FIELDS = (
    "JobIDRaw", "JobID", "Submit", "Start", "End", "AllocTRES", "User", "Partition", "QOS",
    "JobName", "Account", "Timelimit", "State", "Constraints",
)  # fmt: skip
ENDED_STATES = "CD,F,TO,CA,OOM,NF"  # completed, failed, timeout, cancelled, OOM, node fail
_GPU_TRES = re.compile(r"gres/gpu(?::([^=,]+))?=(\d+)")
_GPU_GRES = re.compile(r"(?:^|,)(?:gres:)?gpu:([^:,()=]+):\d+")  # ReqGRES `gpu:a100:2`
_ARRAY_TASK = re.compile(r"(\d+)_(\d+)")
_ARRAY_PENDING = re.compile(r"(\d+)_\[[^\]]*\]")  # `1234_[1-5%2]`: tasks not yet started
_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_NOT_A_TIME = ("Unknown", "None", "")
# why `read_row` leaves a row out ("" : a blank line, not a row)
STEP, CPU_ONLY, NEVER_RAN = "steps", "CPU-only", "never ran"
LEFT_OUT = (STEP, CPU_ONLY, NEVER_RAN)
_FREE_LAST = "Constraints"  # may hold a `|` when it is the last column (`_fields`)
_TASK_ID_BASE = 1 << 32  # Slurm job ids are uint32: synthetic array-task ids lie above


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


def array_task_job_id(array_job_id: int, task_id: int) -> int:
    """The id of array task `task_id` of `array_job_id` when the export has no JobIDRaw:
    (task + 1) x 2^32 + array job id, above every Slurm job id and unique per task."""
    return (task_id + 1) * _TASK_ID_BASE + array_job_id


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


def gpu_tres(tres: str) -> tuple[int, str]:
    """GPUs and GPU type of a TRES string: the untyped `gres/gpu=N` count, else the sum
    of the typed ones (`gres/gpu:a100=4`); the types named, sorted, joined by ","."""
    untyped, typed = None, 0
    types: set[str] = set()
    for m in _GPU_TRES.finditer(tres):
        if m.group(1) is None:
            untyped = int(m.group(2)) if untyped is None else untyped
        elif int(m.group(2)) > 0:
            typed += int(m.group(2))
            types.add(m.group(1))
    return (typed if untyped is None else untyped), ",".join(sorted(types))


def _gpu_type(cols: Columns, f: list[str], found: str) -> str:
    """The type from the TRES column read, else ReqTRES's, else ReqGRES's (`gpu:a100:2`)."""
    if found or "ReqTRES" not in cols.index and "ReqGRES" not in cols.index:
        return found
    found = gpu_tres(cols.get(f, "ReqTRES"))[1]
    if found:
        return found
    return ",".join(sorted(set(_GPU_GRES.findall(cols.get(f, "ReqGRES")))))


def _job_ids(cols: Columns, f: list[str]) -> tuple[int, int | None, int | None]:
    """(job id, array job id, array task id) of a job row (not a step); ValueError for
    an id that is no single job's."""
    text = cols.get(f, "JobID")
    array_job = task = None
    if m := _ARRAY_TASK.fullmatch(text):
        array_job, task = int(m.group(1)), int(m.group(2))
    elif _ARRAY_PENDING.fullmatch(text):
        raise ValueError(f"JobID {text!r} names several array tasks (a pending record)")
    raw = cols.get(f, "JobIDRaw")
    if raw:
        if not raw.isdigit():
            raise ValueError(f"JobIDRaw: not a job id: {raw[:40]!r}")
        return int(raw), array_job, task
    if array_job is not None and task is not None:
        return array_task_job_id(array_job, task), array_job, task
    if not text.isdigit():  # a heterogeneous job's `1234+0`, or no id at all
        raise ValueError(f"JobID: not a job id: {text[:40]!r}")
    return int(text), None, None


def _fields(cols: Columns, line: str) -> list[str]:
    """A line's fields. sacct does not escape `|` inside a field: a `--constraint` such as
    `a100|h100` in the last column (the export in docs/simulator.md puts Constraints
    last) keeps its `|`; extra fields anywhere else make the row malformed."""
    f = line.rstrip("\r\n").split("|")
    n = len(cols.index)
    if len(f) > n and cols.index.get(_FREE_LAST) == n - 1:
        f[n - 1 :] = ["|".join(f[n - 1 :])]
    if len(f) != n:
        raise ValueError(f"expected {n} fields, got {len(f)}")
    return f


def read_row(cols: Columns, line: str) -> CompletedJob | str:
    """One data line: its job, or why it is no GPU job that ran (`LEFT_OUT`: a step, a
    CPU-only job, one cancelled before it started or as it started; "": a blank line).
    ValueError says what is wrong with a malformed one."""
    if not line.strip():
        return ""
    f = _fields(cols, line)
    if "." in cols.get(f, "JobIDRaw") or "." in cols.get(f, "JobID"):
        return STEP  # job steps (123.batch, 123.extern, 123.0) repeat their job
    tres = f[cols.index[cols.tres]]
    gpus, gpu_type = gpu_tres(tres)
    if gpus == 0:
        return CPU_ONLY if tres.strip() else NEVER_RAN  # no AllocTRES: never allocated
    if f[cols.index["Start"]] in _NOT_A_TIME:
        return NEVER_RAN
    start = sacct_time(f[cols.index["Start"]], "Start")
    end = sacct_time(f[cols.index["End"]], "End")
    if end < start:
        raise ValueError(f"End before Start ({end - start:.0f} s)")
    if end == start:
        return NEVER_RAN  # ran no time (cancelled as it started): nothing to count
    job_id, array_job, task = _job_ids(cols, f)
    limit = cols.get(f, "Timelimit")
    return CompletedJob(
        job_id=job_id,
        gpus=gpus,
        submit_time=sacct_time(f[cols.index["Submit"]], "Submit"),
        start_time=start,
        end_time=end,
        user=cols.get(f, "User"),
        partition=cols.get(f, "Partition"),
        name=cols.get(f, "JobName"),
        account=cols.get(f, "Account"),
        time_limit_s=slurm_time_s(limit) if limit else None,
        comment=cols.get(f, "Comment"),
        gpu_type=_gpu_type(cols, f, gpu_type),
        constraints=cols.get(f, "Constraints"),
        qos=cols.get(f, "QOS"),
        array_job_id=array_job,
        array_task_id=task,
        reservation=cols.get(f, "Reservation"),
        state=cols.get(f, "State"),
    )


def parse_row(cols: Columns, line: str) -> CompletedJob | None:
    """`read_row`'s job, or None for a row left out."""
    job = read_row(cols, line)
    return job if isinstance(job, CompletedJob) else None


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
