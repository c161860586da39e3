"""The wire format of per-job reports from node agents to the priority service: the
report, its JSON body, its signature and the shared secret file.

Both ends import it from here (the agent sends with `nodeagent.report`, the service
receives with `slurm_ext.service.listener`), so they agree by construction and
`slurm_ext` never imports `nodeagent`.

Semantics: every report is cumulative for one job on one node, from `period_start` (when
the agent first saw the job) to `period_end`. A later report for the same (node, job_id)
supersedes an earlier one, so re-delivery after a lost response double-counts nothing:
the service keeps, per (node, job_id), the report with the greatest `period_end`.
`final` is true once the job has left the node.

Authentication: the JSON body is signed with HMAC-SHA256 over the exact bytes sent, hex
in the `X-Slurm-Ext-Signature` header, with a secret shared through a file readable only
by its owner (root or SlurmUser). The body carries `sent_at`, stamped when the batch is
sent (not when it was spooled), so the service refuses bodies outside a window of its
own clock; it also refuses reports for jobs Slurm ran on another node than the body's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SIGNATURE_HEADER = "X-Slurm-Ext-Signature"
NODE_HEADER = "X-Slurm-Ext-Node"  # the node whose key signed the body (per-node keys)
REPORTS_PATH = "/v1/reports"
FORMAT_VERSION = 1
MAX_JOB_ID = 2**32 - 1  # Slurm job ids are uint32
MAX_COUNT = 2**62  # bytes, samples, cores: far above anything real, far below int64
# What one job can physically reach on one node, with room to spare: a report past these
# is refused, so a holder of the secret cannot push totals to inf ("infh GPU-time").
MAX_GPUS_PER_NODE = 64
MAX_GPU_W = 2_000.0  # watts one GPU draws, at most
MAX_HOST_W = 20_000.0  # watts one node's CPUs draw, at most
MAX_CORES = 4_096
MAX_GPU_MEM_BYTES = MAX_GPUS_PER_NODE * 2**40  # 1 TiB a GPU
MAX_PERIOD_S = 400 * 86_400.0  # a report period: longer than any job's time limit
MAX_UNIX_S = 2.0**33  # timestamps before the year 2242
SLACK_S = 3_600.0  # sampling and clock slack added to a period's length
_SIGNATURE_RE = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class JobReport:
    """What one node saw of one job, cumulative since `period_start`."""

    node: str
    job_id: int
    gpu_seconds: float  # GPUs held x wall seconds (2D attained service on this node)
    gpu_util_mean: float  # 0..1, mean over the job's GPU-time
    gpu_util_peak: float  # 0..1
    gpu_mem_peak_bytes: int  # peak of the job's GPU memory summed over its GPUs
    cpu_cores_alloc: int | None  # from the job's cpuset when known
    cpu_cores_used: float  # mean cores busy (CPU seconds / wall seconds)
    gpu_energy_j: float
    cpu_energy_j: float
    gpu_uuids: tuple[str, ...]
    gpu_type: str  # GPU name as NVML reports it, "" when the job used no GPU
    samples: int
    period_start: float  # unix seconds
    period_end: float
    final: bool = False
    # when the agent froze this (opportunistic) job, its clock; None while it runs. The
    # service requeues a job paused too long (slurm_ext/service/opportunistic_requeue.py).
    paused_since: float | None = None


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "node": (str,),
    "job_id": (int,),
    "gpu_seconds": (int, float),
    "gpu_util_mean": (int, float),
    "gpu_util_peak": (int, float),
    "gpu_mem_peak_bytes": (int,),
    "cpu_cores_alloc": (int, type(None)),
    "cpu_cores_used": (int, float),
    "gpu_energy_j": (int, float),
    "cpu_energy_j": (int, float),
    "gpu_uuids": (list,),
    "gpu_type": (str,),
    "samples": (int,),
    "period_start": (int, float),
    "period_end": (int, float),
    "final": (bool,),
}
# absent from a body means the default (older agents do not send them)
_OPTIONAL = {"paused_since": (int, float, type(None))}


def encode_reports(node: str, reports: list[JobReport], sent_at: float | None = None) -> bytes:
    """JSON body for one POST; every report must belong to `node`."""
    items = []
    for r in reports:
        if r.node != node:
            raise ValueError(f"report for job {r.job_id} names node {r.node!r}, not {node!r}")
        d = dataclasses.asdict(r)
        d["gpu_uuids"] = list(r.gpu_uuids)
        if d["paused_since"] is None:
            del d["paused_since"]  # a running job's report reads as before
        items.append(d)
    doc = {
        "version": FORMAT_VERSION,
        "node": node,
        "sent_at": time.time() if sent_at is None else sent_at,
        "reports": items,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class ReportBatch:
    """One decoded POST body."""

    node: str
    sent_at: float
    reports: list[JobReport]


def decode_reports(body: bytes) -> list[JobReport]:
    """Parse and validate a body from `encode_reports`; ValueError says what is wrong."""
    return decode_batch(body).reports


def decode_batch(body: bytes) -> ReportBatch:
    """Parse and validate a body from `encode_reports`, keeping its node and `sent_at`.
    Every number must be finite and within range (NaN, Infinity, a job id beyond
    uint32: ValueError), so nothing a sender writes can poison totals downstream."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"report body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValueError("report body nested too deeply") from exc
    if not isinstance(doc, dict):
        raise ValueError("report body must be a JSON object")
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"unsupported report version {doc.get('version')!r}")
    node = doc.get("node")
    if not isinstance(node, str) or not node or len(node) > 255:
        raise ValueError("report body lacks a node name (or it is over 255 characters)")
    sent_at = doc.get("sent_at")
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        raise ValueError("report body lacks a numeric sent_at")
    if not math.isfinite(sent_at):
        raise ValueError("sent_at: not finite")
    items = doc.get("reports")
    if not isinstance(items, list):
        raise ValueError("'reports' must be a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"reports[{i}] must be an object")
        missing = set(_FIELD_TYPES) - set(item)
        extra = set(item) - set(_FIELD_TYPES) - set(_OPTIONAL)
        if missing or extra:
            parts = [f"missing {sorted(missing)}"] if missing else []
            parts += [f"unknown {sorted(extra)}"] if extra else []
            raise ValueError(f"reports[{i}]: " + ", ".join(parts))
        for key, types in (_FIELD_TYPES | _OPTIONAL).items():
            value = item.get(key)
            bad_bool = isinstance(value, bool) and bool not in types
            if bad_bool or not isinstance(value, types):
                raise ValueError(f"reports[{i}].{key}: wrong type {type(value).__name__}")
        for key, value in item.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"reports[{i}].{key}: not finite")
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_COUNT:
                raise ValueError(f"reports[{i}].{key}: {value} out of range")
        if not 1 <= item["job_id"] <= MAX_JOB_ID:
            raise ValueError(f"reports[{i}].job_id: {item['job_id']} outside 1..{MAX_JOB_ID}")
        if item["node"] != node:
            raise ValueError(f"reports[{i}].node {item['node']!r} differs from body node {node!r}")
        if not all(isinstance(u, str) for u in item["gpu_uuids"]):
            raise ValueError(f"reports[{i}].gpu_uuids: must be strings")
        for key in ("gpu_util_mean", "gpu_util_peak"):
            if not 0.0 <= item[key] <= 1.0:
                raise ValueError(f"reports[{i}].{key}: {item[key]} outside 0..1")
        for key in ("gpu_seconds", "gpu_mem_peak_bytes", "cpu_cores_used", "gpu_energy_j"):
            if item[key] < 0:
                raise ValueError(f"reports[{i}].{key}: negative")
        if item["cpu_energy_j"] < 0 or item["samples"] < 0:
            raise ValueError(f"reports[{i}]: negative cpu_energy_j or samples")
        if item["period_end"] < item["period_start"]:
            raise ValueError(f"reports[{i}]: period_end before period_start")
        paused = item.get("paused_since")
        if paused is not None and not item["period_start"] <= paused <= item["period_end"]:
            raise ValueError(f"reports[{i}].paused_since: outside period_start..period_end")
        _check_physical(i, item)
        item = dict(item)
        item["gpu_uuids"] = tuple(item["gpu_uuids"])
        for key in ("gpu_seconds", "gpu_util_mean", "gpu_util_peak", "cpu_cores_used"):
            item[key] = float(item[key])
        for key in ("gpu_energy_j", "cpu_energy_j", "period_start", "period_end"):
            item[key] = float(item[key])
        if paused is not None:
            item["paused_since"] = float(paused)
        out.append(JobReport(**item))
    return ReportBatch(node, float(sent_at), out)


def _check_physical(i: int, item: dict) -> None:
    """ValueError when a report claims more than one job on one node can reach in its
    period (GPUs x time, power x time, cores, memory) or a time outside any plausible
    clock."""
    if not 0 <= item["period_start"] <= MAX_UNIX_S or not 0 <= item["period_end"] <= MAX_UNIX_S:
        raise ValueError(f"reports[{i}]: period outside 1970..2242")
    span = item["period_end"] - item["period_start"]
    if span > MAX_PERIOD_S:
        raise ValueError(f"reports[{i}]: period of {span:.0f} s is longer than {MAX_PERIOD_S:.0f}")
    reach = span + SLACK_S
    limits = {
        "gpu_seconds": MAX_GPUS_PER_NODE * reach,
        "gpu_energy_j": MAX_GPUS_PER_NODE * MAX_GPU_W * reach,
        "cpu_energy_j": MAX_HOST_W * reach,
        "cpu_cores_used": MAX_CORES,
        "gpu_mem_peak_bytes": MAX_GPU_MEM_BYTES,
        "samples": reach * 10,  # ten samples a second, at most
    }
    for key, limit in limits.items():
        if item[key] > limit:
            raise ValueError(
                f"reports[{i}].{key}: {item[key]:.6g} is more than one job on one "
                f"node can reach in its period ({limit:.6g})"
            )
    if item["cpu_cores_alloc"] is not None and not 0 <= item["cpu_cores_alloc"] <= MAX_CORES:
        raise ValueError(f"reports[{i}].cpu_cores_alloc: outside 0..{MAX_CORES}")
    if len(item["gpu_uuids"]) > MAX_GPUS_PER_NODE:
        raise ValueError(f"reports[{i}].gpu_uuids: more than {MAX_GPUS_PER_NODE}")


def per_job(reports: Iterable[JobReport], periods: bool = True) -> dict[int, list[JobReport]]:
    """Reports grouped by job, re-deliveries removed.

    A report is cumulative within its (node, job, period_start); only the latest
    `period_end` of each counts. An agent that lost its state file starts a new period
    from zero, so with `periods` the periods of a node are all kept (their figures add
    up, as energy totals need); without it one report per node remains, the latest (what
    a per-node allocation, as the predictor reads, needs).
    """
    latest: dict[tuple, JobReport] = {}
    for r in reports:
        key = (r.job_id, r.node, r.period_start) if periods else (r.job_id, r.node)
        cur = latest.get(key)
        if cur is None or r.period_end > cur.period_end:
            latest[key] = r
    out: dict[int, list[JobReport]] = {}
    for key in sorted(latest, key=lambda k: tuple(map(str, k))):
        out.setdefault(key[0], []).append(latest[key])
    return out


def sign(body: bytes, secret: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def node_key(master: bytes, node: str) -> bytes:
    """The report key of one node, derived from the service's secret: a node holding only
    its own key can sign reports as itself and as no other node (`slurm-ext-agent
    report-key NODE` prints it for the node's `report.secret_file`)."""
    return (
        hmac.new(master, b"slurm-ext node report key\0" + node.encode(), hashlib.sha256)
        .hexdigest()
        .encode()
    )


def node_name_ok(node: str | None) -> bool:
    """A node header the service will look at: 1-255 printable ASCII, no spaces."""
    return (
        bool(node)
        and len(node) <= 255
        and node.isascii()
        and node.isprintable()
        and " " not in node
    )


def signature_shape_ok(signature: str | None) -> bool:
    """Whether a header can be a signature at all (64 hex digits), checked before the
    body is read; anything else (missing, non-ASCII, too long) is refused at once."""
    return bool(signature) and _SIGNATURE_RE.fullmatch(signature.strip()) is not None


def verify(body: bytes, secret: bytes, signature: str | None) -> bool:
    """Constant-time check of a hex HMAC-SHA256 signature; False for a missing or
    malformed one (never an exception: the header is the client's)."""
    if not secret or not signature_shape_ok(signature):
        return False
    assert signature is not None
    return hmac.compare_digest(sign(body, secret), signature.strip().lower())


class SecretFileError(ValueError):
    """The shared secret file is missing, empty or too widely readable."""


def read_secret(path: str | Path) -> bytes:
    """Read the shared secret, refusing a file that group or other may access."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise SecretFileError(f"secret file {p}: cannot stat: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SecretFileError(f"secret file {p}: not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise SecretFileError(
            f"secret file {p}: mode {mode:04o} lets group/other access it; "
            f"run: chmod 600 {p} (owner root or SlurmUser)"
        )
    try:
        secret = p.read_bytes().strip()
    except OSError as exc:
        raise SecretFileError(f"secret file {p}: cannot read: {exc.strerror}") from exc
    if not secret:
        raise SecretFileError(f"secret file {p}: empty")
    return secret
