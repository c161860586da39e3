"""SlurmClient over Slurm's own commands: `squeue --json`, `sinfo --json`, `scontrol`,
`sacct` (completed jobs, through the parser in `slurm/sacct.py`).

Tested live on Slurm 22.05 (Debian 12) and 25.11 (built from source). Handles both JSON
shapes: plain numbers and strings (data_parser v0.0.37/38, Slurm <= 22.05) and the
{"set","infinite","number"} objects and state lists of v0.0.39+ (Slurm >= 23.02).
Where a release's JSON lacks what the service reads, one more command fills it in:
- `sinfo --json` has per-node records up to 23.x; later releases group nodes (a `sinfo`
  list), so nodes come from `scontrol --json show nodes` (same field names) instead.
- partitions come from `scontrol show partition -o` (key=value text) on every release:
  22.05's scontrol has no --json, and 25.11's `scontrol --json show partitions` lacks the
  Default flag.
- `squeue --json` of 25.11 has no `site_factor`; pending jobs' site factors come from
  `sprio` then (running and held jobs read 0: sprio lists neither).
- `scontrol suspend/resume` of an unknown job says "Unexpected message received"; the
  job is then looked up so the caller gets JobNotFound, as for every other write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slurm_ext.core.model import Cluster, CompletedJob, Job, JobState, Node, Partition
from slurm_ext.slurm.client import (
    JobNotFound,
    SlurmError,
    SlurmUnavailable,
    map_records,
    parse_private_data,
    write_each,
)
from slurm_ext.slurm.command import failure_message, run_command, slurm_env
from slurm_ext.slurm.gres import job_gpus, parse_gpus
from slurm_ext.slurm.hostlist import expand_hostlist
from slurm_ext.slurm.sacct import parse_sacct, sacct_argv, slurm_time_s

log = logging.getLogger("slurm_ext.slurm")

_UNAVAILABLE_HINTS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
)
BATCH = 500  # scontrol updates fed through one process
_AMBIGUOUS_HINTS = ("Unexpected message received",)  # suspend/resume of an unknown job
_NOT_FOUND_HINTS = ("Invalid job id specified", "Job has already finished", "does not exist")


def number(value: Any, default: float | None = None) -> float | None:
    """A Slurm JSON number: plain, or {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _int(value: Any, default: int = 0) -> int:
    n = number(value)
    return default if n is None else int(n)


def _optional_int(value: Any) -> int | None:
    n = number(value)
    return None if n is None else int(n)


def _time(value: Any) -> float | None:
    n = number(value)
    return n if n else None  # Slurm uses 0 for "not yet"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


class CliSlurmClient:
    """Talks to slurmctld through the Slurm client commands on PATH."""

    def __init__(
        self,
        slurm_conf: str | None = None,
        timeout: float = 30.0,
        bin_dir: str | None = None,
    ) -> None:
        self.timeout = timeout
        self.bin_dir = bin_dir
        self._env = slurm_env(slurm_conf)
        for var in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_SORT", "SINFO_FORMAT"):
            self._env.pop(var, None)
        self._nodes_from_scontrol = False  # set once sinfo --json shows the grouped shape

    # ---- plumbing -------------------------------------------------------------------
    def _run(self, argv: list[str], stdin: str | None = None) -> str:
        res = run_command(argv, self.timeout, self._env, stdin, self.bin_dir)
        if res.returncode != 0:
            cmd, msg = " ".join(argv), failure_message(res)
            if any(h in msg for h in _NOT_FOUND_HINTS):
                raise JobNotFound(cmd, msg)
            if any(h in msg for h in _UNAVAILABLE_HINTS):
                raise SlurmUnavailable(cmd, msg)
            raise SlurmError(cmd, msg)
        return res.stdout

    def _load(self, argv: list[str]) -> dict[str, Any]:
        out = self._run(argv)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(
                " ".join(argv), f"malformed JSON from Slurm: {exc} (first bytes: {out[:80]!r})"
            ) from exc
        if not isinstance(data, dict):
            raise SlurmError(" ".join(argv), f"JSON is a {type(data).__name__}, not an object")
        return data

    def _json(
        self, argv: list[str], key: str, data: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        if data is None:
            data = self._load(argv)
        cmd = " ".join(argv)
        if not isinstance(data.get(key), list):
            raise SlurmError(cmd, f"JSON has no '{key}' list (keys: {sorted(data)[:10]})")
        errors = [e for e in data.get("errors") or [] if e]
        if errors and not data[key]:
            # e.g. squeue --json exits 0 with "Failed while looking for jobs" when the
            # controller is unreachable: treat as unavailable so callers back off.
            raise SlurmUnavailable(cmd, f"Slurm reported errors: {errors}")
        return data[key]

    def _update(self, job_id: int, **fields: str | int) -> None:
        # one argv item per field; an empty value (ReqNodeList=) clears the field
        self._run(
            ["scontrol", "update", f"JobId={int(job_id)}", *(f"{k}={v}" for k, v in fields.items())]
        )

    # ---- reads ----------------------------------------------------------------------
    def jobs(self, states: Sequence[str] = ("PENDING", "RUNNING", "SUSPENDED")) -> list[Job]:
        wanted = {s.upper() for s in states}
        records = self._json(["squeue", "--json"], "jobs")
        jobs = map_records(
            records, job_from_squeue, "squeue --json", "job record", _record_id("job_id")
        )
        jobs = [j for j in jobs if j.state.value in wanted]
        if any(isinstance(r, dict) and "site_factor" not in r for r in records) and any(
            j.state == JobState.PENDING for j in jobs
        ):
            factors = self._site_factors()
            jobs = [replace(j, site_factor=factors.get(j.job_id, 0)) for j in jobs]
        return jobs

    def _site_factors(self) -> dict[int, int]:
        """Pending jobs' site factors from `sprio` (for a squeue --json without them)."""
        try:
            out = self._run(["sprio", "-h", "-o", "%i|%S"])
        except SlurmUnavailable:
            raise
        except SlurmError as exc:  # e.g. priority/basic: no sprio; factors read 0
            log.debug("site factors unreadable: %s", exc)
            return {}
        factors = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 2 and parts[0].isdigit():
                try:
                    factors[int(parts[0])] = int(float(parts[1]))
                except ValueError:
                    log.warning("sprio: skipping unreadable line %r", line[:200])
        return factors

    def private_data(self) -> frozenset[str]:
        """PrivateData from `scontrol show config` (the running slurmctld's values);
        SlurmError when the output has no PrivateData line."""
        out = self._run(["scontrol", "show", "config"])
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "PrivateData":
                return parse_private_data(value)
        raise SlurmError("scontrol show config", "no PrivateData line in its output")

    def completed_jobs(self, since: float) -> list[CompletedJob]:
        """GPU jobs that ended since `since` (unix s), from `sacct`; SlurmError with
        sacct's words where accounting is off. Malformed rows are left out, logged."""
        argv = sacct_argv(since)
        jobs, problems = parse_sacct(self._run(argv))
        if problems:
            log.warning(
                "sacct: %d unreadable rows left out (first: %s)", len(problems), problems[0]
            )
        return jobs

    def nodes(self) -> list[Node]:
        if self._nodes_from_scontrol:
            records = self._json(["scontrol", "--json", "show", "nodes"], "nodes")
        else:
            data = self._load(["sinfo", "--json"])
            if "nodes" not in data and isinstance(data.get("sinfo"), list):
                self._nodes_from_scontrol = True  # >= 24.05: per-group records only
                return self.nodes()
            records = self._json(["sinfo", "--json"], "nodes", data)
        out: dict[str, Node] = {}
        for node in map_records(
            records, node_from_sinfo, "sinfo --json", "node record", _record_id("name")
        ):
            out.setdefault(node.name, node)  # sinfo repeats a node once per partition
        return list(out.values())

    def partitions(self) -> list[Partition]:
        """Every partition, from `scontrol show partition -o` (one line each)."""
        argv = ["scontrol", "show", "partition", "-o"]
        lines = [line for line in self._run(argv).splitlines() if line.strip()]
        return map_records(
            lines, partition_from_scontrol, " ".join(argv), "partition", lambda line: line[:60]
        )

    def cluster(self) -> Cluster:
        return Cluster(nodes=tuple(self.nodes()), partitions=tuple(self.partitions()))

    # ---- writes ---------------------------------------------------------------------
    def set_priority(self, job_id: int, priority: int) -> None:
        self._update(job_id, Priority=int(priority))

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        self._update(job_id, SiteFactor=int(site_factor))

    def set_priorities(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return self._update_many("Priority", values)

    def set_site_factors(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return self._update_many("SiteFactor", values)

    def _update_many(self, field: str, values: Mapping[int, int]) -> dict[int, SlurmError]:
        """One `scontrol` per BATCH jobs, its commands on stdin (~0.8 ms a job against
        ~3.7 ms for a process each). scontrol runs every line and exits non-zero if any
        failed without saying which line, so such a batch is written again one job at a
        time (the same values: harmless) to name the failures."""
        failed: dict[int, SlurmError] = {}
        items = [(int(j), int(v)) for j, v in values.items()]
        for i in range(0, len(items), BATCH):
            chunk = items[i : i + BATCH]
            script = "".join(f"update JobId={j} {field}={v}\n" for j, v in chunk)
            try:
                self._run(["scontrol"], stdin=script)
            except SlurmUnavailable:
                raise
            except SlurmError:
                failed.update(write_each(lambda j, v: self._update(j, **{field: v}), dict(chunk)))
        return failed

    def set_nice(self, job_id: int, nice: int) -> None:
        self._update(job_id, Nice=int(nice))

    def set_placement(
        self,
        job_id: int,
        required_nodes: Sequence[str] | None = None,
        excluded_nodes: Sequence[str] | None = None,
        num_nodes: int | None = None,
    ) -> None:
        fields: dict[str, str | int] = {}
        if required_nodes is not None:
            fields["ReqNodeList"] = ",".join(required_nodes)
        if excluded_nodes is not None:
            fields["ExcNodeList"] = ",".join(excluded_nodes)
        if num_nodes is not None:
            fields["NumNodes"] = int(num_nodes)
        if fields:
            self._update(job_id, **fields)

    def hold(self, job_id: int) -> None:
        self._run(["scontrol", "hold", str(int(job_id))])

    def release(self, job_id: int) -> None:
        self._run(["scontrol", "release", str(int(job_id))])

    def suspend(self, job_id: int) -> None:
        self._run_known(["scontrol", "suspend", str(int(job_id))], job_id)

    def resume(self, job_id: int) -> None:
        self._run_known(["scontrol", "resume", str(int(job_id))], job_id)

    def _run_known(self, argv: list[str], job_id: int) -> None:
        """`_run`, turning Slurm's "Unexpected message received" for a job it does not
        know (suspend/resume) into JobNotFound, after asking whether the job exists."""
        try:
            self._run(argv)
        except (JobNotFound, SlurmUnavailable):
            raise
        except SlurmError as exc:
            if not any(h in exc.message for h in _AMBIGUOUS_HINTS):
                raise
            try:
                self._run(["scontrol", "show", "job", str(int(job_id))])
            except JobNotFound as gone:
                raise JobNotFound(exc.command, f"{exc.message} ({gone.message})") from exc
            raise

    def requeue(self, job_id: int) -> None:
        self._run(["scontrol", "requeue", str(int(job_id))])


def _record_id(key: str) -> Callable[[Any], object]:
    return lambda rec: rec.get(key) if isinstance(rec, dict) else rec


def job_from_squeue(rec: dict[str, Any]) -> Job:
    """Map one `squeue --json` job record (any supported data_parser version)."""
    state = JobState.parse(rec.get("job_state"))
    num_nodes = _int(rec.get("node_count"), 1) or 1
    tasks = _int(rec.get("tasks"), 1) or 1
    gpus, per_node, gtype = job_gpus(
        rec.get("tres_per_job"),
        rec.get("tres_per_node"),
        rec.get("tres_per_task"),
        num_nodes,
        tasks,
        rec.get("tres_alloc_str") if state in (JobState.RUNNING, JobState.SUSPENDED) else None,
    )
    limit = number(rec.get("time_limit"))
    nodes_str = _text(rec.get("nodes"))
    reason = _text(rec.get("state_reason"))
    prio = _int(rec.get("priority"))
    return Job(
        job_id=_int(rec["job_id"]),
        name=_text(rec.get("name")),
        user=_text(rec.get("user_name")) or str(rec.get("user_id", "")),
        account=_text(rec.get("account")),
        partition=_text(rec.get("partition")),
        qos=_text(rec.get("qos")),
        state=state,
        reason=reason,
        priority=prio,
        nice=_int(rec.get("nice")),
        site_factor=_int(rec.get("site_factor")),
        gpus=gpus,
        gpus_per_node=per_node,
        gpu_type=gtype,
        num_nodes=num_nodes,
        cpus=_int(rec.get("cpus"), 1) or 1,
        submit_time=_time(rec.get("submit_time")) or 0.0,
        start_time=_time(rec.get("start_time")) if state != JobState.PENDING else None,
        end_time=_time(rec.get("end_time")) if not state.active else None,
        time_limit_s=limit * 60 if limit else None,
        nodes=tuple(expand_hostlist(nodes_str)) if state != JobState.PENDING else (),
        required_nodes=tuple(expand_hostlist(_text(rec.get("required_nodes")))),
        excluded_nodes=tuple(expand_hostlist(_text(rec.get("excluded_nodes")))),
        comment=_text(rec.get("comment")),
        admin_comment=_text(rec.get("admin_comment")),
        held=state == JobState.PENDING and (prio == 0 or reason in ("JobHeldUser", "JobHeldAdmin")),
        requeue=bool(rec.get("requeue", False)),
        tres_per_node=_text(rec.get("tres_per_node")),
        cpus_per_tres=_text(rec.get("cpus_per_tres")),
        restart_count=_optional_int(rec.get("restart_cnt")),
    )


def node_from_sinfo(rec: dict[str, Any]) -> Node:
    """Map one `sinfo --json` node record."""
    state = rec.get("state")
    flags = rec.get("state_flags") or []
    if isinstance(state, list):
        state_str = "+".join(map(str, state))
    else:
        state_str = "+".join([str(state or "UNKNOWN"), *map(str, flags)])
    gpus, gtype = parse_gpus(_text(rec.get("gres")))
    used, _ = parse_gpus(_text(rec.get("gres_used")))
    features = _text(rec.get("active_features") or rec.get("features"))
    return Node(
        name=_text(rec["name"]),
        state=state_str.upper(),
        cpus=_int(rec.get("cpus")),
        cpus_alloc=_int(rec.get("alloc_cpus")),
        gpus=gpus,
        gpus_alloc=used,
        gpu_type=gtype,
        features=tuple(f for f in features.split(",") if f),
        partitions=tuple(rec.get("partitions") or ()),
        memory_mb=_int(rec.get("real_memory")),
        weight=_int(rec.get("weight"), 1),
    )


def scontrol_fields(line: str) -> dict[str, str]:
    """The Key=Value words of one `scontrol show ... -o` line (a value holds no blank)."""
    fields = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            fields[key] = value
    return fields


def partition_from_scontrol(line: str) -> Partition:
    """Map one `scontrol show partition -o` line (22.05 and 25.11 spell it alike)."""
    fields = scontrol_fields(line)
    return Partition(
        name=fields["PartitionName"],
        nodes=tuple(expand_hostlist(fields.get("Nodes"))),
        max_time_s=slurm_time_s(fields.get("MaxTime", "UNLIMITED"), "MaxTime"),
        default=fields.get("Default", "NO").upper() == "YES",
        state=fields.get("State", "UP").upper(),
    )
