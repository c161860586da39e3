"""Per-job running totals on one node, kept by the agent and persisted in its state file."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.policy import colocation as co
from slurm_ext.reports import JobReport


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
        )
