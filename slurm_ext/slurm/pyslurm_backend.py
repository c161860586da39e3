"""SlurmClient over pyslurm >= 25.11 (Slurm's C API), for sites that run Slurm 25.11.

pyslurm is an optional extra built against one Slurm release's headers, so it is imported
lazily in `PySlurmClient.__init__`. The mapping from pyslurm objects to model.Job /
model.Node is kept in pure functions (`job_from_pyslurm`, `node_from_pyslurm`) that read
attributes with getattr, so it is tested on recorded pyslurm-shaped records without
pyslurm installed. It mirrors `cli_backend.job_from_squeue` / `node_from_sinfo`.

Quirks of pyslurm 25.11.2 this module works around or refuses (read from its source):
- `Job.tres_per_node/_job/_task` parse the raw string as key=value pairs, so Slurm's
  `gres/gpu:4` spelling comes back as None; we fall back to the (deprecated)
  `gres_per_node` dict, then to the job's requested/allocated TRES.
- `JobSubmitDescription` skips `nice=0` and `site_factor=0` (falsy), sends empty node
  lists as "unchanged", and applies `nodes` only on submit, never on modify. Those writes
  raise SlurmError instead of silently doing nothing.
- `Job` exposes no site factor when reading, so `Job.site_factor` reads as 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_ext.model import Job, JobState, Node
from slurm_ext.slurm.client import (
    JobNotFound,
    SlurmError,
    SlurmUnavailable,
    map_records,
    write_each,
)
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
_INSTALL_HINT = (
    "install slurm-ext[pyslurm] matching your Slurm release "
    "(pyslurm X.Y.* for Slurm X.Y, built against that release's headers), "
    "or use the CLI backend"
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


def job_from_pyslurm(obj: Any) -> Job:
    """Map one pyslurm.Job (25.11 attribute names) to model.Job, as the CLI backend would."""
    state = JobState.parse(getattr(obj, "state", None))
    num_nodes = _int(getattr(obj, "num_nodes", None), 1) or 1
    tasks = _int(getattr(obj, "ntasks", None), 1) or 1
    per_node = request_text(getattr(obj, "tres_per_node", None))
    if not per_node:
        per_node = request_text(getattr(obj, "gres_per_node", None))
    running = state in (JobState.RUNNING, JobState.SUSPENDED)
    gpus, gpus_per_node, gtype = job_gpus(
        request_text(getattr(obj, "tres_per_job", None)),
        per_node,
        request_text(getattr(obj, "tres_per_task", None)),
        num_nodes,
        tasks,
        tres_text(getattr(obj, "allocated_tres", None)) if running else None,
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


# ---- RPC shell ----------------------------------------------------------------------
class PySlurmClient:
    """Talks to slurmctld through pyslurm's C-API bindings (no subprocesses).

    pyslurm reads slurm.conf once, when it is first imported: from $SLURM_CONF, else
    /etc/slurm/slurm.conf. Passing `slurm_conf` sets os.environ["SLURM_CONF"] for this
    process before that import; it cannot change the config of an already imported
    pyslurm, so a different path then raises SlurmError. RPC time limits are Slurm's own
    (MessageTimeout in slurm.conf); pyslurm offers no per-call timeout.
    """

    def __init__(self, slurm_conf: str | None = None) -> None:
        previous = os.environ.get("SLURM_CONF")
        if slurm_conf:
            if sys.modules.get("pyslurm") is not None and previous != slurm_conf:
                raise SlurmError(
                    "import pyslurm",
                    f"pyslurm is already initialised with SLURM_CONF={previous!r}; "
                    f"cannot switch to {slurm_conf!r} in the same process",
                )
            os.environ["SLURM_CONF"] = slurm_conf
        try:
            import pyslurm
        except (ImportError, OSError) as exc:
            if slurm_conf:  # leave the environment as we found it
                if previous is None:
                    os.environ.pop("SLURM_CONF", None)
                else:
                    os.environ["SLURM_CONF"] = previous
            raise SlurmError("import pyslurm", f"{exc}; {_INSTALL_HINT}") from exc
        self._pyslurm = pyslurm
        self.slurm_conf = slurm_conf

    # ---- plumbing -------------------------------------------------------------------
    def _call(self, command: str, fn: Callable[[], Any]) -> Any:
        errors: tuple[type[BaseException], ...] = (ValueError, TypeError)
        base = getattr(self._pyslurm, "PyslurmError", None)
        if isinstance(base, type):
            errors = (base, *errors)
        try:
            return fn()
        except errors as exc:
            raise translate_error(command, exc) from exc

    def _modify(self, job_id: int, **fields: Any) -> None:
        desc = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        command = f"pyslurm.Job({int(job_id)}).modify({desc})"
        ps = self._pyslurm
        self._call(command, lambda: ps.Job(int(job_id)).modify(ps.JobSubmitDescription(**fields)))

    def _job_action(self, job_id: int, action: str) -> None:
        job = self._pyslurm.Job(int(job_id))
        self._call(f"pyslurm.Job({int(job_id)}).{action}()", getattr(job, action))

    # ---- reads ----------------------------------------------------------------------
    def jobs(self, states: Sequence[str] = ("PENDING", "RUNNING", "SUSPENDED")) -> list[Job]:
        wanted = {s.upper() for s in states}
        loaded = self._call("pyslurm.Jobs.load()", self._pyslurm.Jobs.load)
        jobs = map_records(
            loaded.values(),
            job_from_pyslurm,
            "pyslurm.Jobs.load()",
            "job",
            lambda o: getattr(o, "id", None),
        )
        return [j for j in jobs if j.state.value in wanted]

    def nodes(self) -> list[Node]:
        loaded = self._call("pyslurm.Nodes.load()", self._pyslurm.Nodes.load)
        return map_records(
            loaded.values(),
            node_from_pyslurm,
            "pyslurm.Nodes.load()",
            "node",
            lambda o: getattr(o, "name", None),
        )

    # ---- writes ---------------------------------------------------------------------
    def set_priority(self, job_id: int, priority: int) -> None:
        self._modify(job_id, priority=int(priority))

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        if int(site_factor) == 0:
            raise SlurmError(
                f"pyslurm.Job({int(job_id)}).modify(site_factor=0)",
                "not supported by this pyslurm: JobSubmitDescription ignores site_factor=0; "
                "use the CLI backend (scontrol update SiteFactor=0)",
            )
        self._modify(job_id, site_factor=int(site_factor))

    def set_priorities(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return write_each(self.set_priority, values)  # in-process RPCs: no batching to win

    def set_site_factors(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return write_each(self.set_site_factor, values)

    def set_nice(self, job_id: int, nice: int) -> None:
        if int(nice) == 0:
            raise SlurmError(
                f"pyslurm.Job({int(job_id)}).modify(nice=0)",
                "not supported by this pyslurm: JobSubmitDescription ignores nice=0; "
                "use the CLI backend (scontrol update Nice=0)",
            )
        self._modify(job_id, nice=int(nice))

    def set_placement(
        self,
        job_id: int,
        required_nodes: Sequence[str] | None = None,
        excluded_nodes: Sequence[str] | None = None,
        num_nodes: int | None = None,
    ) -> None:
        command = f"pyslurm.Job({int(job_id)}).modify(placement)"
        unsupported = []
        if num_nodes is not None:
            unsupported.append(
                "num_nodes (pyslurm applies JobSubmitDescription.nodes on submit only)"
            )
        if required_nodes is not None and not required_nodes:
            unsupported.append("clearing required_nodes (pyslurm sends an empty list as unchanged)")
        if excluded_nodes is not None and not excluded_nodes:
            unsupported.append("clearing excluded_nodes (pyslurm sends an empty list as unchanged)")
        if unsupported:
            raise SlurmError(
                command,
                "not supported by this pyslurm: "
                + "; ".join(unsupported)
                + "; use the CLI backend",
            )
        fields: dict[str, list[str]] = {}
        if required_nodes:
            fields["required_nodes"] = list(required_nodes)
        if excluded_nodes:
            fields["excluded_nodes"] = list(excluded_nodes)
        if fields:
            self._modify(job_id, **fields)

    def hold(self, job_id: int) -> None:
        self._job_action(job_id, "hold")  # admin hold, like `scontrol hold`

    def release(self, job_id: int) -> None:
        self._job_action(job_id, "release")

    def suspend(self, job_id: int) -> None:
        self._job_action(job_id, "suspend")

    def resume(self, job_id: int) -> None:
        self._job_action(job_id, "unsuspend")  # pyslurm's name for slurm_resume

    def requeue(self, job_id: int) -> None:
        self._job_action(job_id, "requeue")
