"""The decision table the submit hook reads: a versioned, tab-separated text file.

    # slurm-ext predictor table v1
    resnet50<TAB>v100<TAB>7<TAB>0
    resnet50<TAB>*<TAB>7<TAB>0
    # end 2

Columns: workload key, GPU type (`*`: jobs naming no type), CPU cores per GPU (1..1024),
GPU count for elastic jobs (0: no advice; 0..1024). Lua 5.1 reads it with one small read
and string patterns, no libraries. Rules, identical in etc/job_submit.lua:

- more than MAX_BYTES, no header, no trailing newline, or a missing/wrong `# end N`
  trailer (N = row lines): the whole table is ignored;
- a row with a bad field (not 4 tab-separated fields, a key outside [A-Za-z0-9._:/@+-]
  or longer than 128, numbers that are not plain digits or out of range) is ignored;
- a repeated (key, type) keeps the first row.

The writer refuses anything the reader would ignore, and replaces the file atomically
(temp file in the same directory + rename) so the hook never sees half a table. The
evidence behind each row goes to `<table>.evidence.json` for `slurm-ext predict show`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_ext.core.hints import KEY_RE
from slurm_ext.predict.cpu import ANY_GPU, CpuDecision
from slurm_ext.predict.samples import valid_gpu_type

HEADER = "# slurm-ext predictor table v1"
MAX_BYTES = 1 << 20
MAX_CPUS_PER_GPU = 1024
MAX_GPUS = 1024
_NUM_RE = re.compile(r"[0-9]{1,4}")
_END_RE = re.compile(r"# end ([0-9]{1,7})")


class TableError(ValueError):
    """A row cannot be written; the message names the row and the field."""


@dataclass(frozen=True)
class TableRow:
    key: str
    gpu_type: str  # gres type or ANY_GPU
    cpus_per_gpu: int
    gpus: int = 0


@dataclass
class ParsedTable:
    valid: bool  # False: the whole file is ignored
    rows: dict[tuple[str, str], TableRow] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def lookup(self, key: str, gpu_type: str | None) -> TableRow | None:
        """The row for (key, type), else the key's `*` row."""
        if gpu_type:
            row = self.rows.get((key, gpu_type))
            if row is not None:
                return row
        return self.rows.get((key, ANY_GPU))


def row_problem(row: TableRow) -> str | None:
    if not isinstance(row.key, str) or not KEY_RE.fullmatch(row.key):
        return f"key {row.key!r}: not a workload key (letters, digits, ._:/@+-, 1..128 chars)"
    if not isinstance(row.gpu_type, str) or not (
        row.gpu_type == ANY_GPU or (row.gpu_type and valid_gpu_type(row.gpu_type))
    ):
        return f"gpu_type {row.gpu_type!r}: not a gres type name or '*'"
    for name, value, lo, hi in (
        ("cpus_per_gpu", row.cpus_per_gpu, 1, MAX_CPUS_PER_GPU),
        ("gpus", row.gpus, 0, MAX_GPUS),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            return f"{name} {value!r}: expected an integer in {lo}..{hi}"
    return None


def render_table(rows: Iterable[TableRow]) -> str:
    """The file text for `rows`; raises TableError on a row the reader would not accept."""
    lines = [HEADER]
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows):
        problem = row_problem(row)
        if problem:
            raise TableError(f"row {i}: {problem}")
        if (row.key, row.gpu_type) in seen:
            raise TableError(f"row {i}: duplicate key {row.key!r} gpu_type {row.gpu_type!r}")
        seen.add((row.key, row.gpu_type))
        lines.append(f"{row.key}\t{row.gpu_type}\t{row.cpus_per_gpu}\t{row.gpus}")
    lines.append(f"# end {len(lines) - 1}")
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_BYTES:
        raise TableError(
            f"table is {len(text.encode())} bytes, over the {MAX_BYTES} the hook reads"
        )
    return text


def parse_table(text: str) -> ParsedTable:
    """Read table text as the hook does (see the module docstring for the rules)."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_BYTES:
        return ParsedTable(False, problems=[f"over {MAX_BYTES} bytes"])
    if not text.endswith("\n"):
        return ParsedTable(False, problems=["no trailing newline (truncated?)"])
    lines = text[:-1].split("\n")
    if lines[0] != HEADER:
        return ParsedTable(False, problems=[f"first line is not {HEADER!r}"])
    end = _END_RE.fullmatch(lines[-1]) if len(lines) > 1 else None
    body = [ln for ln in lines[1:-1] if ln and not ln.startswith("#")]
    if end is None or int(end.group(1)) != len(body):
        return ParsedTable(False, problems=[f"last line is not '# end {len(body)}' (truncated?)"])
    table = ParsedTable(True)
    for n, line in enumerate(body, 1):
        fields = line.split("\t")
        row = None
        if len(fields) == 4 and _NUM_RE.fullmatch(fields[2]) and _NUM_RE.fullmatch(fields[3]):
            row = TableRow(fields[0], fields[1], int(fields[2]), int(fields[3]))
        problem = (
            "expected 4 tab-separated fields, numbers as digits"
            if row is None
            else row_problem(row)
        )
        if problem:
            table.problems.append(f"row {n}: {problem}")
        elif (row.key, row.gpu_type) in table.rows:
            table.problems.append(f"row {n}: duplicate {row.key!r} {row.gpu_type!r} ignored")
        else:
            table.rows[(row.key, row.gpu_type)] = row
    return table


def load_table(path: str | Path) -> ParsedTable:
    """Read a table file; a missing or unreadable file is an invalid (ignored) table."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        return ParsedTable(False, problems=[f"cannot read {path}: {exc.strerror}"])
    return parse_table(data.decode("utf-8", "surrogateescape"))


def atomic_write(path: str | Path, text: str) -> None:
    """Write via a temp file in the same directory + rename: readers see old or new, never half."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def evidence_path(table_path: str | Path) -> Path:
    return Path(f"{table_path}.evidence.json")


def decisions_to_rows(
    decisions: Iterable[CpuDecision], elastic_gpus: dict[str, int] | None = None
) -> list[TableRow]:
    elastic_gpus = elastic_gpus or {}
    return [
        TableRow(d.key, d.gpu_type, d.cpus_per_gpu, elastic_gpus.get(d.key, 0)) for d in decisions
    ]


def write_table(
    path: str | Path, decisions: list[CpuDecision], elastic_gpus: dict[str, int] | None = None
) -> None:
    """Write the table and its evidence file (evidence first, so a row never lacks it)."""
    text = render_table(decisions_to_rows(decisions, elastic_gpus))
    evidence: dict[str, dict[str, object]] = {}
    for d in decisions:
        evidence.setdefault(d.key, {})[d.gpu_type] = {
            "cpus_per_gpu": d.cpus_per_gpu,
            "source": d.source,
            "reason": d.reason,
            "samples": [list(p) for p in d.samples],
            "fit": asdict(d.fit) if d.fit else None,
            "elastic_gpus": (elastic_gpus or {}).get(d.key, 0),
        }
    atomic_write(evidence_path(path), json.dumps(evidence, indent=1, sort_keys=True) + "\n")
    atomic_write(path, text)
