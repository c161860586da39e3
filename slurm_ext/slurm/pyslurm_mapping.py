"""Pure mapping from pyslurm 25.11 objects to model.Job / Node / CompletedJob, and of pyslurm's
errors to ours, read with getattr so it is tested on recorded pyslurm-shaped records
without pyslurm installed. It mirrors `cli_backend.job_from_squeue` / `node_from_sinfo`;
the RPC shell that uses it is `pyslurm_backend.PySlurmClient`.
"""

from __future__ import annotations

from typing import Any

from slurm_ext.core.model import CompletedJob, Job, JobState, Node, Partition
from slurm_ext.slurm.client import JobNotFound, SlurmError, SlurmUnavailable
from slurm_ext.slurm.gres import job_gpus, parse_gpus
from slurm_ext.slurm.hostlist import expand_hostlist

# Slurm errno values (slurm_errno.h) that mean "slurmctld did not answer".
_UNAVAILABLE_ERRNOS = frozenset(
    {
        1001,  # SLURM_COMMUNICATIONS_CONNECTION_ERROR
        1002,  # SLURM_COMMUNICATIONS_SEND_ERROR
        1003,  # SLURM_COMMUNICATIONS_RECEIVE_ERROR
        1004,  # SLURM_COMMUNICATIONS_SHUTDOWN_ERROR
        1800,  # SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR
        1801,  # SLURMCTLD_COMMUNICATIONS_SEND_ERROR
        1802,  # SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR
        1803,  # SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR
        1804,  # SLURMCTLD_COMMUNICATIONS_BACKOFF
        1805,  # SLURMCTLD_COMMUNICATIONS_HARD_DROP
        5004,  # SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT
        5005,  # SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT
    }
)
_NOT_FOUND_ERRNOS = frozenset({2017, 2021})  # ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE
# The same words the CLI backend looks for, as a net when errno is missing or unknown.
_UNAVAILABLE_HINTS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
)
_NOT_FOUND_HINTS = (
    "Invalid job id specified",
    "Job has already finished",
    "already completing or completed",
    "does not exist",
)


# ---- pure mapping -------------------------------------------------------------------
def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _int(value: Any, default: int = 0) -> int:
    """pyslurm returns None for unset and the string "unlimited" for INFINITE."""
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _time(value: Any) -> float | None:
    n = _int(value)
    return float(n) if n else None


def _gres_count(value: Any) -> int:
    """A gres dict value: an int, {"count": n, "indexes": ...}, or a GPU/TRES object."""
    if isinstance(value, dict):
        return _int(value.get("count"))
    if hasattr(value, "count") and not isinstance(value, (int, str)):
        return _int(value.count)
    return _int(value)


def _gres_items(value: Any) -> list[tuple[str, int]]:
    """(name[:type], count) pairs from a pyslurm gres dict or TrackableResources.gres."""
    gres = getattr(value, "gres", value)
    if not isinstance(gres, dict):
        return []
    out = []
    for key, val in gres.items():
        name = str(key)
        for prefix in ("gres/", "gres:"):
            if name.startswith(prefix):
                name = name[len(prefix) :]
        out.append((name, _gres_count(val)))
    return out


def request_text(value: Any) -> str:
    """A per-node/job/task request as Slurm >= 23.02 spells it: `gres/gpu:a100:2`.

    Accepts a raw string (kept), a gres dict (`Job.gres_per_node`) or a
    TrackableResources-like object with a `.gres` dict.
    """
    if value is None or isinstance(value, str):
        return value or ""
    return ",".join(f"gres/{name}:{count}" for name, count in _gres_items(value))


def tres_text(value: Any) -> str:
    """Allocated/requested TRES as Slurm spells them: `gres/gpu=2,gres/gpu:a100=2`.

    Only the gres part is kept: that is all the GPU count needs.
    """
    if value is None or isinstance(value, str):
        return value or ""
    return ",".join(f"gres/{name}={count}" for name, count in _gres_items(value))


def layout_gpus(obj: Any) -> dict[str, int]:
    """GPUs per node of a running job, from pyslurm's `get_resource_layout_per_node()`
    ({node: {"gres": {"gpu": {"count": n}}}}); {} when there is none."""
    get = getattr(obj, "get_resource_layout_per_node", None)
    layout = get() if callable(get) else None
    out: dict[str, int] = {}
    for node, res in (layout or {}).items():
        gres = res.get("gres") if isinstance(res, dict) else None
        n = sum(c for name, c in _gres_items(gres or {}) if name.split(":")[0] == "gpu")
        if n:
            out[str(node)] = n
    return out


def job_from_pyslurm(obj: Any) -> Job:
    """Map one pyslurm.Job (25.11 attribute names) to model.Job, as the CLI backend would."""
    state = JobState.parse(getattr(obj, "state", None))
    num_nodes = _int(getattr(obj, "num_nodes", None), 1) or 1
    tasks = _int(getattr(obj, "ntasks", None), 1) or 1
    per_node = request_text(getattr(obj, "tres_per_node", None))
    if not per_node:
        per_node = request_text(getattr(obj, "gres_per_node", None))
    running = state in (JobState.RUNNING, JobState.SUSPENDED)
    alloc = tres_text(getattr(obj, "allocated_tres", None)) if running else None
    if running and not parse_gpus(alloc)[0]:
        laid_out = sum(layout_gpus(obj).values())
        alloc = f"gres/gpu={laid_out}" if laid_out else alloc
    gpus, gpus_per_node, gtype = job_gpus(
        request_text(getattr(obj, "tres_per_job", None)),
        per_node,
        request_text(getattr(obj, "tres_per_task", None)),
        num_nodes,
        tasks,
        alloc,
    )
    if not gpus:
        # --gpus / --gpus-per-task requests are invisible in pyslurm 25.11.2's
        # tres_per_job/_task; the requested TRES still carry the total when
        # AccountingStorageTRES tracks gres/gpu.
        gpus, req_type = parse_gpus(tres_text(getattr(obj, "requested_tres", None)))
        gtype = gtype or req_type
    limit = _int(getattr(obj, "time_limit", None))
    reason = _text(getattr(obj, "state_reason", None))
    prio = _int(getattr(obj, "priority", None))
    cpus_per_gpu = _int(getattr(obj, "cpus_per_gpu", None))
    user = _text(getattr(obj, "user_name", None))
    if not user and getattr(obj, "user_id", None) is not None:
        user = str(obj.user_id)
    return Job(
        job_id=int(obj.id),
        name=_text(getattr(obj, "name", None)),
        user=user,
        account=_text(getattr(obj, "account", None)),
        partition=_text(getattr(obj, "partition", None)),
        qos=_text(getattr(obj, "qos", None)),
        state=state,
        reason=reason,
        priority=prio,
        nice=_int(getattr(obj, "nice", None)),
        site_factor=_int(getattr(obj, "site_factor", None)),
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        gpu_type=gtype,
        num_nodes=num_nodes,
        cpus=_int(getattr(obj, "cpus", None), 1) or 1,
        submit_time=_time(getattr(obj, "submit_time", None)) or 0.0,
        start_time=_time(getattr(obj, "start_time", None)) if state != JobState.PENDING else None,
        end_time=_time(getattr(obj, "end_time", None)) if not state.active else None,
        time_limit_s=limit * 60.0 if limit else None,
        nodes=(
            tuple(expand_hostlist(_text(getattr(obj, "allocated_nodes", None))))
            if state != JobState.PENDING
            else ()
        ),
        required_nodes=tuple(expand_hostlist(_text(getattr(obj, "required_nodes", None)))),
        excluded_nodes=tuple(expand_hostlist(_text(getattr(obj, "excluded_nodes", None)))),
        comment=_text(getattr(obj, "comment", None)),
        admin_comment=_text(getattr(obj, "admin_comment", None)),
        held=state == JobState.PENDING and (prio == 0 or reason in ("JobHeldUser", "JobHeldAdmin")),
        requeue=bool(getattr(obj, "is_requeueable", False)),
        tres_per_node=per_node,
        cpus_per_tres=f"gres/gpu:{cpus_per_gpu}" if cpus_per_gpu else "",
        restart_count=_restart_count(obj),
    )


def _restart_count(obj: Any) -> int | None:
    """Times Slurm requeued the job, where this pyslurm exposes it (None: not known)."""
    for attr in ("restart_count", "restart_cnt", "requeue_count"):
        value = getattr(obj, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def node_from_pyslurm(obj: Any) -> Node:
    """Map one pyslurm.Node (25.11 attribute names) to model.Node."""
    gpus, gtype = parse_gpus(request_text(getattr(obj, "configured_gres", None)))
    # allocated_gres comes from the node's allocated TRES (total and typed share both).
    used, _ = parse_gpus(tres_text(getattr(obj, "allocated_gres", None)))
    features = getattr(obj, "active_features", None) or getattr(obj, "available_features", None)
    return Node(
        name=_text(obj.name),
        state=_text(getattr(obj, "state", None) or "UNKNOWN").upper(),
        cpus=_int(getattr(obj, "total_cpus", None)),
        cpus_alloc=_int(getattr(obj, "allocated_cpus", None)),
        gpus=gpus,
        gpus_alloc=used,
        gpu_type=gtype,
        features=tuple(f for f in _text(features).split(",") if f),
        partitions=tuple(getattr(obj, "partitions", None) or ()),
        memory_mb=_int(getattr(obj, "real_memory", None)),
        weight=_int(getattr(obj, "weight", None), 1),
    )


def partition_from_pyslurm(obj: Any) -> Partition:
    """Map one pyslurm.Partition (25.11 attribute names): `max_time` is minutes, or
    "UNLIMITED" (None when unset), `nodes` a hostlist string."""
    minutes = _int(getattr(obj, "max_time", None))
    return Partition(
        name=_text(obj.name),
        nodes=tuple(expand_hostlist(_text(getattr(obj, "nodes", None)))),
        max_time_s=minutes * 60.0 if minutes else None,
        default=bool(getattr(obj, "is_default", False)),
        state=_text(getattr(obj, "state", None) or "UP").upper(),
    )


_ENDED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL"})


def completed_from_db(obj: Any) -> CompletedJob | None:
    """Map one pyslurm.db.Job to the record sacct's parser gives for the same row (its
    allocation, as `sacct --allocations`); None for one that is no GPU job that ran and
    ended (the states of `slurm.sacct.ENDED_STATES`)."""
    state = _text(getattr(obj, "state", None)).split(" ")[0].upper()  # "CANCELLED by 0"
    if state not in _ENDED:
        return None
    start = _time(getattr(obj, "start_time", None))
    end = _time(getattr(obj, "end_time", None))
    if start is None or end is None or end <= start:
        return None
    gpus, _ = parse_gpus(tres_text(getattr(obj, "allocated_tres", None)))
    if not gpus:
        return None
    limit = _int(getattr(obj, "time_limit", None))  # minutes; "PartitionLimit": unknown
    return CompletedJob(
        job_id=int(obj.id),
        gpus=gpus,
        submit_time=_time(getattr(obj, "submit_time", None)) or start,
        start_time=start,
        end_time=end,
        user=_text(getattr(obj, "user_name", None)),
        partition=_text(getattr(obj, "partition", None)),
        name=_text(getattr(obj, "name", None)),
        account=_text(getattr(obj, "account", None)),
        time_limit_s=limit * 60.0 if limit else None,
        comment=_text(getattr(obj, "comment", None)),
    )


def translate_error(command: str, exc: BaseException) -> SlurmError:
    """Turn a pyslurm exception into our error classes, keeping pyslurm's message."""
    errno = getattr(exc, "errno", None)
    msg = str(getattr(exc, "msg", None) or exc or type(exc).__name__)
    if errno is not None and errno not in (0, -1):
        msg = f"{msg} (slurm errno {errno})"
    if errno in _NOT_FOUND_ERRNOS or any(h in msg for h in _NOT_FOUND_HINTS):
        return JobNotFound(command, msg)
    if errno in _UNAVAILABLE_ERRNOS or any(h in msg for h in _UNAVAILABLE_HINTS):
        return SlurmUnavailable(command, msg)
    return SlurmError(command, msg)
