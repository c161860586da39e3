"""`slurm-ext energy`: per-job GPU time and energy from the node agents' reports.

Reads the service's store read-only. A report is cumulative for one (node, job) since
its `period_start`, and re-delivery repeats it, so per (node, job, period) only the
report with the greatest `period_end` counts (`slurm_ext.reports.per_job`); a job's
figures are the sum of those over its nodes and a node's periods (an agent that lost its
state starts a new period from zero).
Users come from the service's job records (jobs it saw in Slurm); "" when unknown.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

import click

from slurm_ext.reports import JobReport, per_job
from slurm_ext.service_cli import config_option, json_option, load_service_config
from slurm_ext.store import Store, StoreError

J_PER_KWH = 3.6e6
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


def parse_since(text: str, now: float) -> float:
    """Unix seconds from '3600' (unix time), '2h' / '30m' / '7d' (ago) or an ISO time."""
    m = _RELATIVE.match(text.strip())
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r}: expected unix seconds, an age such as 2h / 30m / 7d, or an ISO time"
        ) from exc


def _fmt_s(v: float) -> str:
    return f"{v / 3600:.2f}h" if v >= 3600 else f"{v:.0f}s"


@click.command()
@config_option
@json_option
@click.option("--job", "job_id", type=int, default=None, help="Only this job.")
@click.option("--user", default=None, help="Only jobs of this user (as the service saw them).")
@click.option(
    "--since",
    default=None,
    help="Only jobs reported on or after this time (unix seconds, 2h/30m/7d ago, ISO); "
    "their figures stay whole-job.",
)
def energy(
    config_path: str | None,
    as_json: bool,
    job_id: int | None,
    user: str | None,
    since: str | None,
) -> None:
    """GPU-seconds, GPU and CPU energy, utilisation and memory per job, from agent reports."""
    cfg = load_service_config(config_path)
    try:
        store = Store(cfg.store, readonly=True)
    except StoreError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    try:
        reports = store.reports(job_id)
        users = {j: r.user for j, r in store.jobs(include_done=True).items()}
    finally:
        store.close()
    jobs = aggregate(reports, users)
    if since is not None:
        cutoff = parse_since(since, time.time())
        jobs = [j for j in jobs if j.period_end >= cutoff]
    if user is not None:
        jobs = [j for j in jobs if j.user == user]
    total = totals(jobs)
    if as_json:
        click.echo(json.dumps({"jobs": [asdict(j) for j in jobs], "totals": total}, indent=1))
        return
    click.echo(
        f"{'JOBID':>8} {'USER':<10} {'GPU-TIME':>9} {'GPU kJ':>10} {'GPU kWh':>9} {'CPU kJ':>9} "
        f"{'UTIL':>5} {'PEAK':>5} {'MEM GiB':>8} NODES"
    )
    for j in jobs:
        click.echo(
            f"{j.job_id:>8} {j.user[:10]:<10} {_fmt_s(j.gpu_seconds):>9} "
            f"{j.gpu_energy_j / 1000:>10.1f} {j.gpu_energy_kwh:>9.3f} {j.cpu_energy_j / 1000:>9.1f} "
            f"{j.gpu_util_mean:>5.0%} {j.gpu_util_peak:>5.0%} {j.gpu_mem_peak_bytes / 2**30:>8.1f} "
            f"{','.join(j.nodes)}{'' if j.final else ' (running)'}"
        )
    click.echo(
        f"total: {total['jobs']} jobs, {_fmt_s(total['gpu_seconds'])} GPU-time, "
        f"GPU {total['gpu_energy_j'] / 1000:.1f} kJ ({total['gpu_energy_kwh']:.3f} kWh), "
        f"CPU {total['cpu_energy_j'] / 1000:.1f} kJ"
    )
