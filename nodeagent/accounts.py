"""Per-job running totals on one node, kept by the agent and persisted in its state file."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from nodeagent.gpu import GpuSample
from slurm_ext.core.reports import JobReport
from slurm_ext.policy import colocation as co


@dataclass(frozen=True)
class JobGpuUse:
    """One job's utilisation and memory on one device, in one sample."""

    job_id: int
    gpu: GpuSample
    util: float | None
    memory_bytes: int


@dataclass
class JobAccount:
    """Running totals of one job on this node; persisted so counters survive restarts."""

    job_id: int
    first_seen: float  # unix seconds
    last_seen: float
    klass: str = co.GUARANTEED
    qos: str = ""
    partition: str = ""
    gpu_seconds: float = 0.0
    util_seconds: float = 0.0  # GPU-seconds whose utilisation was measurable
    util_weighted: float = 0.0  # sum of util x dt over those
    util_peak: float = 0.0
    mem_peak_bytes: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    gpu_energy_j: float = 0.0
    cpu_energy_j: float = 0.0
    gpu_uuids: list[str] = field(default_factory=list)
    gpu_type: str = ""
    cpus_alloc: int | None = None
    samples: int = 0
    paused_since: float | None = None  # when this agent froze it (None: running)

    def report(self, node: str, final: bool) -> JobReport:
        mean = self.util_weighted / self.util_seconds if self.util_seconds > 0 else 0.0
        return JobReport(
            node=node,
            job_id=self.job_id,
            gpu_seconds=self.gpu_seconds,
            gpu_util_mean=min(1.0, mean),
            gpu_util_peak=min(1.0, self.util_peak),
            gpu_mem_peak_bytes=self.mem_peak_bytes,
            cpu_cores_alloc=self.cpus_alloc,
            cpu_cores_used=self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0,
            gpu_energy_j=self.gpu_energy_j,
            cpu_energy_j=self.cpu_energy_j,
            gpu_uuids=tuple(self.gpu_uuids),
            gpu_type=self.gpu_type,
            samples=self.samples,
            period_start=self.first_seen,
            period_end=self.last_seen,
            final=final,
            # within the period, as the service checks (a pause stamped before a sample)
            paused_since=(
                None
                if self.paused_since is None
                else min(max(self.paused_since, self.first_seen), self.last_seen)
            ),
        )


def job_gpu_use(
    gpus: list[GpuSample], job_of_pid: dict[int, int], paused: Collection[int]
) -> list[JobGpuUse]:
    """Each job's utilisation and memory on each device it has processes on. Without
    per-process utilisation, a job alone (others paused or absent) gets the GPU's."""
    uses = []
    for g in gpus:
        per_job: dict[int, tuple[float, int]] = {}
        for p in g.processes:
            job = job_of_pid.get(p.pid)
            if job is None:
                continue
            u, m = per_job.get(job, (0.0, 0))
            per_job[job] = (u + (p.sm_util or 0.0), m + (p.used_memory_bytes or 0))
        running = [j for j in per_job if j not in paused]
        for job, (u, m) in sorted(per_job.items()):
            if g.process_util_known:
                util: float | None = min(1.0, u)
            elif running == [job] and g.util is not None:
                util = g.util
            elif job in paused:
                util = 0.0
            else:
                util = None
            uses.append(JobGpuUse(job, g, util, m))
    return uses


def account_gpu(accounts: dict[int, JobAccount], uses: list[JobGpuUse], dt: float) -> None:
    """Add one sample's GPU time, utilisation and memory to the jobs' accounts."""
    mem_now: dict[int, int] = {}
    for u in uses:
        a = accounts.get(u.job_id)
        if a is None:
            continue
        a.gpu_seconds += dt
        if u.util is not None:
            a.util_seconds += dt
            a.util_weighted += u.util * dt
            a.util_peak = max(a.util_peak, u.util)
        mem_now[u.job_id] = mem_now.get(u.job_id, 0) + u.memory_bytes
        if u.gpu.uuid not in a.gpu_uuids:
            a.gpu_uuids.append(u.gpu.uuid)
        a.gpu_type = a.gpu_type or u.gpu.name
    for job, m in mem_now.items():
        a = accounts[job]
        a.mem_peak_bytes = max(a.mem_peak_bytes, m)
        a.samples += 1
