"""What one agent step saw and did, frozen: the exporter, `slurm-ext-agent show` and
tests read this instead of the agent's working state.

The agent builds a new snapshot at the end of each step (and after a shutdown resume)
and swaps it in with one assignment, so a reader on another thread (the exporter)
always gets one whole, consistent sample and needs no lock. Mappings are read-only
views of copies made for the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from nodeagent.accounts import JobAccount, JobGpuUse
from nodeagent.cgroups import JobProcesses
from nodeagent.gpu import GpuSample
from nodeagent.procinfo import GpuProcessInfo, HostView
from slurm_ext.core.reports import JobReport

K = TypeVar("K")
V = TypeVar("V")


def frozen(d: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy of `d`."""
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class JobView:
    """One job present on the node at the sample."""

    job_id: int
    klass: str
    qos: str
    partition: str
    pids: tuple[int, ...]
    procs: tuple[tuple[int, int], ...]  # (pid, start ticks): the progress file's lookup
    from_environ: bool  # mapped by SLURM_JOB_ID, not by its cgroup
    rss_bytes: int
    cpu_s: float  # CPU seconds of the job's processes on this node, so far
    paused: bool
    progress_per_s: float | None  # as co-location read it this sample (guaranteed jobs)
    report: JobReport  # running totals, as the next report would carry them

    @classmethod
    def of(
        cls,
        acc: JobAccount,
        jp: JobProcesses | None,
        node: str,
        paused: bool,
        rates: Mapping[int, float | None],
    ) -> JobView:
        """The view of one job from its account and (None: not seen) its processes."""
        return cls(
            job_id=acc.job_id,
            klass=acc.klass,
            qos=acc.qos,
            partition=acc.partition,
            pids=tuple(jp.pids) if jp else (),
            procs=tuple(jp.cpu_by_proc) if jp else (),
            from_environ=jp.from_environ if jp else False,
            rss_bytes=jp.rss_bytes if jp else 0,
            cpu_s=acc.cpu_s,
            paused=paused,
            progress_per_s=rates.get(acc.job_id),
            report=acc.report(node, final=False),
        )


@dataclass(frozen=True)
class AgentSnapshot:
    node: str
    taken_at: float = 0.0  # wall-clock unix seconds; 0 before the first step
    samples_total: int = 0
    last_duration_s: float = 0.0  # CPU seconds of the step
    gpus: tuple[GpuSample, ...] = ()
    job_gpu: tuple[JobGpuUse, ...] = ()
    jobs: Mapping[int, JobView] = field(default_factory=lambda: frozen({}))
    gpu_processes: tuple[GpuProcessInfo, ...] = ()
    host: HostView | None = None
    gpu_energy_total: Mapping[str, float] = field(default_factory=lambda: frozen({}))
    cpu_energy_total: float = 0.0
    action_counts: Mapping[tuple[str, str], int] = field(default_factory=lambda: frozen({}))
    eaco_verdicts: Mapping[tuple[str, str], int] = field(default_factory=lambda: frozen({}))
    error_counts: Mapping[str, int] = field(default_factory=lambda: frozen({}))
    warnings: tuple[str, ...] = ()  # the latest distinct problems logged (each once)
    # reports (None when the agent sends none): how long deliveries have been failing,
    # and the batches waiting in the spool meanwhile
    report_failing_s: float | None = None
    report_backlog: int | None = None

    def outside_jobs(self) -> tuple[GpuProcessInfo, ...]:
        """GPU processes in no job: who uses a GPU without Slurm knowing."""
        return tuple(p for p in self.gpu_processes if p.job_id is None)
