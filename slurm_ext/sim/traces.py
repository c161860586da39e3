"""Trace readers: Tiresias CSV, `sacct --parsable2` exports, Alibaba PAI job/task tables.

Every reader yields TraceJob rows with their file line, and says why it leaves any other
row out (a sacct step, a CPU-only job, one that never ran). A bad row raises TraceError
naming the file and line, unless `skip_bad` is set, in which case it is skipped and
counted. Readers see the file through `_Lines`: a line over MAX_LINE_BYTES (so any
field), one with a NUL byte or one that is not UTF-8 is a bad row like any other, never
a traceback. Job ids are unique in a trace read: a second row with an id already read is
a TraceError naming both lines, with or without `skip_bad` (the simulator tells jobs
apart by id). `Trace.summary` is one line on what was read and what was left out, why.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ext.core.hints import parse_hints
from slurm_ext.core.model import CompletedJob, split_partitions
from slurm_ext.slurm.sacct import parse_header, read_row

FORMATS = ("tiresias", "sacct", "pai")
MAX_LINE_BYTES = 128 * 1024


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    gpus: int
    submit_time: float  # seconds from the trace's origin
    duration_s: float  # run time on a consolidated placement, no preemption
    model_tag: str | None = None
    user: str = ""
    partition: str = ""
    cpus_per_gpu: int | None = None  # cores per GPU asked; None: the cluster's even share
    time_limit_s: float | None = None  # the user's limit (Slurm kills there); None: unknown
    job_name: str = ""
    account: str = ""
    checkpoint: bool = False  # opted in to requeue: checkpoints and resumes from the last one
    opportunistic: bool = False  # may share a GPU that a guaranteed job holds (co-location)
    # as Slurm describes the job (sacct traces; read and carried, not modelled yet)
    gpu_type: str = ""  # several types joined by ","
    constraints: str = ""  # --constraint (`a100|h100`)
    qos: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    reservation: str = ""
    state: str = ""  # sacct's State

    @property
    def partitions(self) -> tuple[str, ...]:
        """`partition` as a tuple (`a100,h100`: a job submitted to both)."""
        return split_partitions(self.partition)


class TraceError(ValueError):
    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")


@dataclass
class Trace:
    jobs: list[TraceJob]
    skipped: int = 0  # bad rows (with `skip_bad`)
    problems: list[str] = field(default_factory=list)  # first few skipped-row messages
    rows: int = 0  # data rows read (blank lines aside)
    left_out: dict[str, int] = field(default_factory=dict)  # rows that are no job, per reason
    summary: str = ""  # one line: `read_summary`


def read_summary(path: str | Path, trace: Trace) -> str:
    """One line on a read: rows, jobs used, rows left out and why, GPU types, partitions."""
    why = [f"{n} {reason}" for reason, n in sorted(trace.left_out.items())]
    if trace.skipped:
        why.append(f"{trace.skipped} bad")
    types = _tally(t for j in trace.jobs for t in j.gpu_type.split(",") if t)
    parts = _tally(p for j in trace.jobs for p in j.partitions)
    return (
        f"{path}: {trace.rows} rows read, {len(trace.jobs)} jobs used; left out: "
        f"{', '.join(why) or 'none'}; GPU types: {types or 'not given'}; "
        f"partitions: {parts or 'not given'}"
    )


def _tally(names: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({n})" for name, n in sorted(counts.items()))


def read_trace(
    path: str | Path, fmt: str = "tiresias", skip_bad: bool = False, shift: bool = True
) -> Trace:
    """Read a trace, sorted by submit time and (with `shift`) moved so the first submit is 0.

    shift=False keeps wall-clock times."""
    if fmt not in FORMATS:
        raise ValueError(f"trace format must be one of {FORMATS}, got {fmt!r}")
    p = Path(path)
    if not p.exists():
        raise TraceError(p, 0, "file not found")
    trace = Trace(jobs=[])
    reader = {"tiresias": _tiresias, "sacct": _sacct, "pai": _pai}[fmt]
    try:
        _collect(p, reader(p), trace, skip_bad)
    except (csv.Error, OSError) as exc:  # a header csv cannot read: nothing after it can be
        raise TraceError(p, 0, f"cannot read: {exc}") from exc
    trace.summary = read_summary(p, trace)
    if trace.jobs:
        t0 = min(j.submit_time for j in trace.jobs) if shift else 0.0
        trace.jobs = sorted(
            (TraceJob(**{**j.__dict__, "submit_time": j.submit_time - t0}) for j in trace.jobs),
            key=lambda j: (j.submit_time, j.job_id),
        )
    return trace


def _collect(path: Path, items: Iterable, trace: Trace, skip_bad: bool) -> None:
    """A reader's items into `trace`: (line, job) pairs, TraceErrors (bad rows) and the
    reasons rows were left out; a job id read twice stops the read, naming both lines."""
    seen: dict[int, tuple[str, int]] = {}  # job id -> (file, line) it was read from
    for item in items:
        trace.rows += 1
        if isinstance(item, TraceError):
            if not skip_bad:
                raise item
            trace.skipped += 1
            if len(trace.problems) < 5:
                trace.problems.append(str(item))
        elif isinstance(item, str):
            trace.left_out[item] = trace.left_out.get(item, 0) + 1
        else:
            where, job = item
            first = seen.setdefault(job.job_id, where)
            if first != where:
                raise TraceError(
                    where[0], where[1],
                    f"job id {job.job_id} read twice: first at {first[0]}:{first[1]}",
                )  # fmt: skip
            trace.jobs.append(job)


class _Lines:
    """A trace file's text lines, bounded and checked: a line too long, with a NUL byte or
    not UTF-8 is left out and kept in `errors` (the reader yields them in file order
    through `_checked`). `line` is the file line number of the last line read."""

    def __init__(self, path: Path) -> None:
        self.path, self.line, self.errors = path, 0, []
        self.fh = path.open("rb")

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        while True:
            raw = self.fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                raise StopIteration
            self.line += 1
            if len(raw) > MAX_LINE_BYTES:
                while raw and not raw.endswith(b"\n"):  # skip the rest of it, bounded reads
                    raw = self.fh.readline(MAX_LINE_BYTES)
                self._bad(f"line longer than {MAX_LINE_BYTES} bytes")
            elif b"\0" in raw:
                self._bad("binary data (a NUL byte)")
            else:
                try:
                    return raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self._bad(f"not UTF-8 text (byte {exc.start + 1}: {exc.reason})")

    def _bad(self, message: str) -> None:
        self.errors.append(TraceError(self.path, self.line, message))


def _checked(rows: Iterable, lines: _Lines) -> Iterator:
    """Rows read from `lines`, with the lines left out (and rows csv refused) as
    TraceErrors in file order."""
    it = iter(rows)
    while True:
        try:
            row = next(it)
        except StopIteration:
            row = None
        except csv.Error as exc:
            row = TraceError(lines.path, lines.line, str(exc))
        yield from lines.errors
        lines.errors.clear()
        if row is None:
            return
        yield row


def _positive(value: str, what: str, kind: type = float) -> float:
    x = kind(float(value)) if kind is int else float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return x


def _flag(row: dict[str, str], column: str) -> bool:
    """An optional 0/1 column (empty or absent: 0)."""
    value = (row.get(column) or "0").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{column} must be 0 or 1, got {value!r}")
    return value == "1"


def _tiresias(path: Path) -> Iterator[tuple[tuple[str, int], TraceJob] | TraceError]:
    need = ("job_id", "num_gpu", "submit_time", "duration")
    with _Lines(path) as lines:
        rows = csv.DictReader(lines)
        missing = [c for c in need if c not in (rows.fieldnames or [])]
        if lines.errors:  # the header line itself is unreadable
            yield lines.errors[0]
            return
        if missing:
            yield TraceError(path, 1, f"missing columns {', '.join(missing)}")
            return
        for row in _checked(rows, lines):
            if isinstance(row, TraceError):
                yield row
                continue
            line = lines.line
            try:
                submit = float(row["submit_time"])
                if not math.isfinite(submit) or submit < 0:
                    raise ValueError(f"submit_time must be >= 0, got {row['submit_time']!r}")
                yield (
                    (str(path), line),
                    TraceJob(
                        job_id=int(row["job_id"]),
                        gpus=int(_positive(row["num_gpu"], "num_gpu", int)),
                        submit_time=submit,
                        duration_s=_positive(row["duration"], "duration"),
                        model_tag=(row.get("model_name") or None),
                        user=row.get("user") or "",
                        cpus_per_gpu=(
                            int(_positive(row["cpus_per_gpu"], "cpus_per_gpu", int))
                            if row.get("cpus_per_gpu")
                            else None
                        ),
                        job_name=row.get("job_name") or "",
                        time_limit_s=(
                            _positive(row["time_limit"], "time_limit")
                            if row.get("time_limit")
                            else None
                        ),
                        checkpoint=_flag(row, "checkpoint"),
                        opportunistic=_flag(row, "opportunistic"),
                    ),
                )
            except (TypeError, ValueError) as exc:
                yield TraceError(path, line, str(exc))


def _sacct(path: Path) -> Iterator[tuple[tuple[str, int], TraceJob] | TraceError | str]:
    """`sacct --parsable2 -o JobIDRaw,Submit,Start,End,AllocTRES,User,Partition,JobName`,
    optionally JobID (array tasks), Account, Timelimit, QOS, State, Constraints,
    Reservation and Comment (hints `checkpoint=1`, `opportunistic=1`), read by the
    service's parser (`slurm_ext.slurm.sacct`)."""
    with _Lines(path) as lines:
        header = next(lines, "")
        if lines.errors:  # the header line itself is unreadable
            yield lines.errors[0]
            return
        try:
            cols = parse_header(header)
        except ValueError as exc:
            yield TraceError(path, 1, str(exc))
            return
        for raw in _checked(lines, lines):
            if isinstance(raw, TraceError):
                yield raw
                continue
            try:
                job = read_row(cols, raw)
            except ValueError as exc:
                yield TraceError(path, lines.line, str(exc))
                continue
            if isinstance(job, CompletedJob):
                yield (str(path), lines.line), _trace_job(job, "JobName" in cols.index)
            elif job:
                yield job  # why the row is left out


def _trace_job(job: CompletedJob, named: bool) -> TraceJob:
    """A sacct record as a trace job: its JobName is its model tag when the export has one."""
    hints = parse_hints(job.comment)
    return TraceJob(
        job_id=job.job_id,
        gpus=job.gpus,
        submit_time=job.submit_time,
        duration_s=job.run_s,
        model_tag=job.name if named else None,
        user=job.user,
        partition=job.partition,
        job_name=job.name,
        account=job.account,
        time_limit_s=job.time_limit_s,
        checkpoint=hints.checkpoint,
        opportunistic=hints.opportunistic,
        gpu_type=job.gpu_type,
        constraints=job.constraints,
        qos=job.qos,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        reservation=job.reservation,
        state=job.state,
    )


PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS = (
    "job_name", "task_name", "inst_num", "status", "start_time", "end_time",
    "plan_cpu", "plan_mem", "plan_gpu", "gpu_type",
)  # fmt: skip


def _pai_rows(
    path: Path, columns: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, str]] | TraceError]:
    """PAI tables ship without a header; accept one if present."""
    with _Lines(path) as lines:
        for row in _checked(csv.reader(lines), lines):
            if isinstance(row, TraceError):
                yield row
                continue
            if lines.line == 1 and row and row[0] == columns[0]:
                continue
            yield lines.line, dict(zip(columns, row, strict=False))


def _pai(path: Path) -> Iterator[tuple[tuple[str, int], TraceJob] | TraceError | str]:
    """Alibaba cluster-trace-gpu-v2020: pai_job_table.csv with pai_task_table.csv beside it.

    A job's GPUs are the sum over its tasks of inst_num x plan_gpu / 100 (rounded up);
    its run time spans its tasks' earliest start to latest end.
    """
    job_path = path / "pai_job_table.csv" if path.is_dir() else path
    task_path = job_path.with_name("pai_task_table.csv")
    if not task_path.exists():
        yield TraceError(task_path, 0, "PAI task table not found beside the job table")
        return
    tasks: dict[str, list[float]] = {}  # job -> [gpu percent, start, end]
    for item in _pai_rows(task_path, PAI_TASK_COLUMNS):
        if isinstance(item, TraceError):
            yield item
            continue
        line, r = item
        try:
            if r.get("status") != "Terminated" or not r.get("plan_gpu"):
                continue
            gpu = float(r["inst_num"] or 1) * float(r["plan_gpu"])
            start, end = float(r["start_time"]), float(r["end_time"])
        except (ValueError, KeyError) as exc:
            yield TraceError(task_path, line, str(exc))
            continue
        t = tasks.setdefault(r["job_name"], [0.0, math.inf, 0.0])
        t[0] += gpu
        t[1] = min(t[1], start)
        t[2] = max(t[2], end)
    for item in _pai_rows(job_path, PAI_JOB_COLUMNS):
        if isinstance(item, TraceError):
            yield item
            continue
        line, r = item
        t = tasks.get(r.get("job_name", ""))
        if r.get("status") != "Terminated":
            yield "not terminated"
            continue
        if t is None or t[0] <= 0:
            yield "no GPU tasks"
            continue
        try:
            duration = t[2] - t[1]
            if not duration > 0:
                raise ValueError(f"task end before start ({duration} s)")
            yield (
                (str(job_path), line),
                TraceJob(
                    job_id=line,
                    gpus=max(1, math.ceil(t[0] / 100.0 - 1e-9)),
                    submit_time=float(r["start_time"]),
                    duration_s=duration,
                    user=r.get("user", ""),
                ),
            )
        except (ValueError, KeyError) as exc:
            yield TraceError(job_path, line, str(exc))
