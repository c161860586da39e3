"""What the submit hook would change in a job: the Python twin of etc/job_submit.lua's plan.

Used by `slurm-ext predict apply --dry-run` (admins checking a table before installing it)
and by the tests that run the same jobs through the Lua hook and compare. Keep the two in
step: same fields, same order, same note text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from slurm_ext.core.hints import KEY_RE, parse_hints
from slurm_ext.predict.samples import valid_gpu_type
from slurm_ext.predict.table import ParsedTable

NO_LIMIT = 4294967294  # Slurm's NO_VAL; INFINITE is one more: both mean no limit
NO_VAL16 = 65534  # an unset 16-bit field, e.g. cpus_per_task
_COUNT_RE = re.compile(r"[0-9]{1,4}")


@dataclass(frozen=True)
class JobRequest:
    """The job_desc fields the hook reads, as slurmctld hands them over (None: unset)."""

    comment: str | None = None
    name: str | None = None
    user_name: str | None = None
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    tres_per_task: str | None = None
    num_tasks: int | None = None  # None or NO_VAL: unset (one task)
    cpus_per_tres: str | None = None
    cpus_per_task: int | None = None
    # the most CPUs one node gives the job: the partition's MaxCPUsPerNode and its CPUs per
    # node (total_cpus / total_nodes), the smaller; None: no limit
    max_cpus_per_node: int | None = None
    # job_desc.shared: 0 is --exclusive (whole nodes, every core already the job's)
    shared: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> JobRequest:
        """From a dry-run JSON object; raises ValueError naming a bad or unknown field."""
        if not isinstance(data, dict):
            raise ValueError("job: expected a JSON object")
        known = {f: t for f, t in cls.__annotations__.items()}
        kwargs: dict[str, Any] = {}
        for k, v in data.items():
            if k not in known:
                raise ValueError(f"job.{k}: unknown field (known: {', '.join(known)})")
            want = int if "int" in known[k] else str
            if v is not None and (isinstance(v, bool) or not isinstance(v, want)):
                raise ValueError(f"job.{k}: expected {want.__name__} or null, got {v!r}")
            kwargs[k] = v
        return cls(**kwargs)


@dataclass(frozen=True)
class HookConfig:
    respect_explicit_cpus: bool = True  # a job's own --cpus-per-gpu is kept
    max_cpus_per_gpu: int = 0  # 0: no cap besides what one node has
    gpus_per_node: int = 0  # GPUs on the partition's nodes; 0: unknown (no elastic cap)


@dataclass(frozen=True)
class Rewrite:
    changes: dict[str, str] = field(default_factory=dict)  # job_desc field -> new value
    note: str = ""  # what the user and the admin comment are told; "" when unchanged
    reason: str = ""


@dataclass(frozen=True)
class GpuRequest:
    entries: tuple[str, ...]
    at: int
    gpu_type: str | None
    count: int
    head: str  # the entry up to its count: "gres/gpu:a100:", "gres/gpu=", "gres:gpu:"
    prefix: str  # "gres:" (22.05) or "gres/" (23.02+): how this Slurm spells cpus_per_tres

    def with_count(self, n: int) -> str:
        """The request with another count, in the spelling Slurm handed over."""
        entry = f"{self.head}{n}"
        return ",".join(entry if i == self.at else e for i, e in enumerate(self.entries))


def _is_gpu_entry(entry: str) -> bool:
    return entry[:8] in ("gres:gpu", "gres/gpu") and entry[8:9] in ("", ":", "=")


def parse_gpu(tres: str | None) -> GpuRequest | None | bool:
    """The one GPU entry of a TRES string, in every spelling Slurm hands the hook:
    `gres:gpu[:type]:N` (22.05), `gres/gpu[:type]:N` and `gres/gpu[:type]=N` (23.02+).
    None: no GPUs, False: not understood."""
    if not tres:
        return None
    entries = tuple(tres.split(","))
    hits = [i for i, e in enumerate(entries) if _is_gpu_entry(e)]
    if not hits:
        return None
    if len(hits) > 1:
        return False
    entry = entries[hits[0]]
    rest = entry[9:]
    m = re.fullmatch(r"([^:=]+)[:=]([^:=]+)", rest) if entry[8:9] == ":" else None
    gpu_type, count = (m.group(1), m.group(2)) if m else (None, rest)
    if gpu_type is not None and not valid_gpu_type(gpu_type):
        return False
    if not _COUNT_RE.fullmatch(count) or int(count) > 1024:
        return False
    if int(count) == 0:
        return None
    head = entry[: len(entry) - len(count)]
    return GpuRequest(entries, hits[0], gpu_type, int(count), head, entry[:5])


def _unlimited(n: int | None) -> bool:
    return n is None or n == 0 or n >= NO_LIMIT


def plan_rewrite(job: JobRequest, table: ParsedTable, conf: HookConfig) -> Rewrite:
    """The hook's decision for `job` given a parsed table (an invalid table changes nothing)."""
    if not table.valid:
        return Rewrite(reason="predictor table ignored: " + "; ".join(table.problems))
    hints = parse_hints(job.comment)
    if hints.all_off:
        return Rewrite(reason="opted out (slurm_ext=off)")
    fld, req = "tres_per_node", parse_gpu(job.tres_per_node)
    if req is None:
        fld, req = "tres_per_job", parse_gpu(job.tres_per_job)
    if req is None:
        fld, req = "tres_per_task", parse_gpu(job.tres_per_task)
    if req is None:
        return Rewrite(reason="no GPUs requested")
    if req is False:
        return Rewrite(reason="GPU request not understood")
    assert isinstance(req, GpuRequest)
    key = hints.model or f"{job.user_name or ''}/{job.name or ''}"
    if not KEY_RE.fullmatch(key):
        return Rewrite(reason="no valid workload key")
    row = table.lookup(key, req.gpu_type)
    if row is None:
        return Rewrite(reason=f"unknown workload key {key}")
    changes: dict[str, str] = {}
    parts: list[str] = []
    gpus = req.count
    node_gpus = conf.gpus_per_node
    hi = hints.elastic[1] if hints.elastic else 0
    if 0 < node_gpus < hi:
        hi = node_gpus  # more GPUs than a node has: Slurm would reject the job
    if (
        hints.elastic
        and hi >= hints.elastic[0]
        and row.gpus > 0
        and fld == "tres_per_node"
        and "gpu" not in hints.opt_out
    ):
        g = max(hints.elastic[0], min(hi, row.gpus))
        if g != req.count:
            changes["tres_per_node"] = req.with_count(g)
            parts.append(f"tres_per_node {job.tres_per_node} -> {changes['tres_per_node']}")
            gpus = g
    explicit = job.cpus_per_task not in (None, NO_VAL16) or (
        conf.respect_explicit_cpus and job.cpus_per_tres is not None
    )
    whole_nodes = job.shared == 0
    if "cpu" not in hints.opt_out and not explicit and not whole_nodes:
        n = row.cpus_per_gpu
        if conf.max_cpus_per_gpu > 0:
            n = min(n, conf.max_cpus_per_gpu)
        if not _unlimited(job.max_cpus_per_node):
            on_node = gpus  # the most GPUs the job may put on one node
            if fld == "tres_per_task":
                on_node = gpus * (1 if _unlimited(job.num_tasks) else job.num_tasks)  # type: ignore[operator]
            if 0 < node_gpus < on_node:
                on_node = node_gpus
            n = min(n, max(1, job.max_cpus_per_node // on_node))  # type: ignore[operator]
        value = f"{req.prefix}gpu:{n}"
        if value != job.cpus_per_tres:
            changes["cpus_per_tres"] = value
            text = f"cpus_per_tres {job.cpus_per_tres or 'unset'} -> {value}"
            if n != row.cpus_per_gpu:
                text += f" (capped from {row.cpus_per_gpu})"
            parts.append(text)
    if not parts:
        return Rewrite(reason=f"nothing to change for {key}")
    note = f"slurm-ext: {'; '.join(parts)} [key={key} gpu_type={row.gpu_type}]"
    return Rewrite(changes, note, "rewritten")
