"""SlurmClient over pyslurm >= 25.11 (Slurm's C API), for sites that run Slurm 25.11.

pyslurm is an optional extra built against one Slurm release's headers, so it is imported
lazily in `PySlurmClient.__init__`. The mapping from pyslurm objects to model.Job /
model.Node is pure and lives in pyslurm_mapping.py (re-exported here).

Tested live on Slurm 25.11.2 with pyslurm 25.11.2 built against it. What pyslurm 25.11.2
cannot express (read from its source, confirmed live) is done another way, here:
- `Job.tres_per_node/_job` parse the raw string as key=value pairs, so Slurm's `gres/gpu:4`
  spelling comes back as None. Per node: the (deprecated) `gres_per_node` dict. Running
  jobs: the GPUs of `get_resource_layout_per_node()` (pyslurm, from the loaded job).
  Pending per-job requests (--gpus=N): one `squeue -O JobID,tres-per-job` (command line),
  only when a pending job shows no GPUs otherwise.
- `Node.allocated_gres` is empty unless AccountingStorageTRES tracks gres/gpu: nodes'
  allocated GPUs are summed from the running jobs' layouts (pyslurm).
- `Job` has no site factor: pending jobs' site factors come from `sprio` (command line).
- `JobSubmitDescription` skips `nice=0` and `site_factor=0` (falsy), sends empty node
  lists as "unchanged", and applies `nodes` only on submit: those writes go through
  `scontrol update` (command line).
- suspend/resume of an unknown job fail with errno 5005 ("Zero Bytes were transmitted"),
  which also means "slurmctld down"; the job is then looked up (pyslurm) so an unknown
  job is JobNotFound and only a silent controller SlurmUnavailable.
The command-line parts use the CLI backend (`CliSlurmClient`, same `slurm_conf`), with the
Slurm commands on PATH or in `bin_dir`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slurm_ext.core.model import Cluster, CompletedJob, Job, JobState, Node, Partition
from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.slurm.client import (
    JobNotFound,
    SlurmError,
    SlurmUnavailable,
    map_records,
    write_each,
)
from slurm_ext.slurm.gres import parse_gpus
from slurm_ext.slurm.pyslurm_mapping import (
    completed_from_db,
    job_from_pyslurm,
    layout_gpus,
    node_from_pyslurm,
    partition_from_pyslurm,
    request_text,
    translate_error,
    tres_text,
)

__all__ = [
    "PySlurmClient",
    "job_from_pyslurm",
    "layout_gpus",
    "node_from_pyslurm",
    "partition_from_pyslurm",
    "request_text",
    "translate_error",
    "tres_text",
]

log = logging.getLogger("slurm_ext.slurm")
_INSTALL_HINT = (
    "install slurm-ext[pyslurm] matching your Slurm release "
    "(pyslurm X.Y.* for Slurm X.Y, built against that release's headers), "
    "or use the CLI backend"
)


# ---- RPC shell ----------------------------------------------------------------------
class PySlurmClient:
    """Talks to slurmctld through pyslurm's C-API bindings (no subprocesses).

    pyslurm reads slurm.conf once, when it is first imported: from $SLURM_CONF, else
    /etc/slurm/slurm.conf. Passing `slurm_conf` sets os.environ["SLURM_CONF"] for this
    process before that import; it cannot change the config of an already imported
    pyslurm, so a different path then raises SlurmError. RPC time limits are Slurm's own
    (MessageTimeout in slurm.conf); pyslurm offers no per-call timeout.
    """

    def __init__(self, slurm_conf: str | None = None, bin_dir: str | None = None) -> None:
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
        # for what pyslurm cannot express (module docstring); MessageTimeout bounds it too
        self._cli = CliSlurmClient(slurm_conf=slurm_conf, bin_dir=bin_dir)

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
        command = f"pyslurm.Job({int(job_id)}).{action}()"
        try:
            self._call(command, getattr(job, action))
        except (JobNotFound, SlurmUnavailable) as exc:
            if isinstance(exc, SlurmUnavailable):
                # 25.11 answers suspend/resume of an unknown job with errno 5005: ask
                # whether the job exists before telling the caller slurmctld is down
                load = self._pyslurm.Job.load
                self._call(f"pyslurm.Job.load({int(job_id)})", lambda: load(int(job_id)))
            raise

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
        jobs = [j for j in jobs if j.state.value in wanted]
        pending = [j for j in jobs if j.state == JobState.PENDING]
        if not pending:
            return jobs
        factors = self._cli._site_factors()
        per_job = self._per_job_requests() if any(not j.gpus for j in pending) else {}
        out = []
        for j in jobs:
            if j.state == JobState.PENDING:
                gpus, gtype = (j.gpus, j.gpu_type) if j.gpus else per_job.get(j.job_id, (0, None))
                j = replace(j, site_factor=factors.get(j.job_id, 0), gpus=gpus, gpu_type=gtype)
            out.append(j)
        return out

    def _per_job_requests(self) -> dict[int, tuple[int, str | None]]:
        """Pending jobs' --gpus requests (tres_per_job), which pyslurm 25.11.2 loses."""
        try:
            out = self._cli._run(["squeue", "-h", "-t", "PD", "-O", "JobID:|,tres-per-job:|"])
        except SlurmUnavailable:
            raise
        except SlurmError as exc:  # no squeue here: such jobs read 0 GPUs, as before
            log.warning("pending jobs' --gpus requests unreadable: %s", exc)
            return {}
        found: dict[int, tuple[int, str | None]] = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) >= 2 and parts[0].isdigit():
                try:
                    gpus, gtype = parse_gpus(parts[1])
                except ValueError as exc:
                    log.warning("squeue: skipping unreadable tres-per-job %r: %s", line[:200], exc)
                    continue
                if gpus:
                    found[int(parts[0])] = (gpus, gtype)
        return found

    def private_data(self) -> frozenset[str]:
        """PrivateData from `scontrol show config`, as the CLI backend reads it (the
        service reads it once, at its start: no need for an RPC binding)."""
        return self._cli.private_data()

    def completed_jobs(self, since: float) -> list[CompletedJob]:
        """GPU jobs that ended since `since`, from slurmdbd through pyslurm.db (no sacct)."""
        db = self._pyslurm.db
        command = f"pyslurm.db.Jobs.load(JobFilter(start_time={int(since)}))"
        loaded = self._call(command, lambda: db.Jobs.load(db.JobFilter(start_time=int(since))))
        records = map_records(
            loaded.values(), completed_from_db, command, "job", lambda o: getattr(o, "id", None)
        )
        return [r for r in records if r is not None]

    def nodes(self) -> list[Node]:
        loaded = self._call("pyslurm.Nodes.load()", self._pyslurm.Nodes.load)
        nodes = map_records(
            loaded.values(),
            node_from_pyslurm,
            "pyslurm.Nodes.load()",
            "node",
            lambda o: getattr(o, "name", None),
        )
        if all(n.gpus_alloc for n in nodes if n.gpus):
            return nodes
        # allocated GPUs unknown (gres/gpu not in AccountingStorageTRES): sum the jobs'
        jobs = self._call("pyslurm.Jobs.load()", self._pyslurm.Jobs.load)
        used: dict[str, int] = {}
        for job in jobs.values():
            state = JobState.parse(getattr(job, "state", None))
            if state in (JobState.RUNNING, JobState.SUSPENDED):
                for node, n in layout_gpus(job).items():
                    used[node] = used.get(node, 0) + n
        return [replace(n, gpus_alloc=n.gpus_alloc or used.get(n.name, 0)) for n in nodes]

    def partitions(self) -> list[Partition]:
        loaded = self._call("pyslurm.Partitions.load()", self._pyslurm.Partitions.load)
        return map_records(
            loaded.values(),
            partition_from_pyslurm,
            "pyslurm.Partitions.load()",
            "partition",
            lambda o: getattr(o, "name", None),
        )

    def cluster(self) -> Cluster:
        return Cluster(nodes=tuple(self.nodes()), partitions=tuple(self.partitions()))

    # ---- writes ---------------------------------------------------------------------
    def set_priority(self, job_id: int, priority: int) -> None:
        self._modify(job_id, priority=int(priority))

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        if int(site_factor) == 0:  # JobSubmitDescription drops a 0
            self._cli.set_site_factor(job_id, 0)
            return
        self._modify(job_id, site_factor=int(site_factor))

    def set_priorities(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return write_each(self.set_priority, values)  # in-process RPCs: no batching to win

    def set_site_factors(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        return write_each(self.set_site_factor, values)

    def set_nice(self, job_id: int, nice: int) -> None:
        if int(nice) == 0:  # JobSubmitDescription drops a 0
            self._cli.set_nice(job_id, 0)
            return
        self._modify(job_id, nice=int(nice))

    def set_placement(
        self,
        job_id: int,
        required_nodes: Sequence[str] | None = None,
        excluded_nodes: Sequence[str] | None = None,
        num_nodes: int | None = None,
    ) -> None:
        clears = (required_nodes is not None and not required_nodes) or (
            excluded_nodes is not None and not excluded_nodes
        )
        if num_nodes is not None or clears:
            # pyslurm sends empty lists as "unchanged" and node counts on submit only
            self._cli.set_placement(job_id, required_nodes, excluded_nodes, num_nodes)
            return
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
