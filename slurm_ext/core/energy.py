"""Per-job GPU time and energy from the node agents' reports (what `slurm-ext energy` prints).

A report is cumulative for one (node, job) since
its `period_start`, and re-delivery repeats it, so per (node, job, period) only the
report with the greatest `period_end` counts (`slurm_ext.core.reports.per_job`); a job's
figures are the sum of those over its nodes and a node's periods (an agent that lost its
state starts a new period from zero).
Users come from the caller (the service's job records); "" when unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.core.reports import JobReport, per_job

J_PER_KWH = 3.6e6


@dataclass
class JobEnergy:
    """One job summed over its nodes."""

    job_id: int
    user: str = ""
    nodes: list[str] = field(default_factory=list)
    gpu_seconds: float = 0.0
    gpu_energy_j: float = 0.0
    gpu_energy_kwh: float = 0.0
    cpu_energy_j: float = 0.0
    gpu_util_mean: float = 0.0  # weighted by each node's GPU-seconds
    gpu_util_peak: float = 0.0
    gpu_mem_peak_bytes: int = 0  # the largest per-node peak (peaks on nodes need not coincide)
    period_start: float = 0.0
    period_end: float = 0.0
    final: bool = False  # every node has sent its final report


def aggregate(reports: list[JobReport], users: dict[int, str] | None = None) -> list[JobEnergy]:
    """Per-job sums over nodes (and over a node's periods) of the latest cumulative reports."""
    users = users or {}
    by_job = per_job(reports, periods=True)
    last_per_node = per_job(reports, periods=False)  # a job is final when every node said so
    out = []
    for job_id, rs in sorted(by_job.items()):
        gpu_s = sum(r.gpu_seconds for r in rs)
        gpu_j = sum(r.gpu_energy_j for r in rs)
        weighted = sum(r.gpu_util_mean * r.gpu_seconds for r in rs)
        out.append(
            JobEnergy(
                job_id=job_id,
                user=users.get(job_id, ""),
                nodes=sorted({r.node for r in rs}),
                gpu_seconds=gpu_s,
                gpu_energy_j=gpu_j,
                gpu_energy_kwh=gpu_j / J_PER_KWH,
                cpu_energy_j=sum(r.cpu_energy_j for r in rs),
                gpu_util_mean=weighted / gpu_s if gpu_s > 0 else 0.0,
                gpu_util_peak=max(r.gpu_util_peak for r in rs),
                gpu_mem_peak_bytes=max(r.gpu_mem_peak_bytes for r in rs),
                period_start=min(r.period_start for r in rs),
                period_end=max(r.period_end for r in rs),
                final=all(r.final for r in last_per_node[job_id]),
            )
        )
    return out


def totals(jobs: list[JobEnergy]) -> dict[str, float | int]:
    gpu_j = sum(j.gpu_energy_j for j in jobs)
    return {
        "jobs": len(jobs),
        "gpu_seconds": sum(j.gpu_seconds for j in jobs),
        "gpu_energy_j": gpu_j,
        "gpu_energy_kwh": gpu_j / J_PER_KWH,
        "cpu_energy_j": sum(j.cpu_energy_j for j in jobs),
    }
