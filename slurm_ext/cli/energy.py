"""`slurm-ext energy`: per-job GPU time and energy from the node agents' reports.

Reads the service's store read-only. A report is cumulative for one (node, job) since
its `period_start`, and re-delivery repeats it, so per (node, job, period) only the
report with the greatest `period_end` counts (`slurm_ext.core.reports.per_job`); a job's
figures are the sum of those over its nodes and a node's periods (an agent that lost its
state starts a new period from zero).
Users come from the service's job records (jobs it saw in Slurm); "" when unknown.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict
from datetime import datetime

import click

from slurm_ext.cli.options import config_option, json_option, load_service_config, open_store
from slurm_ext.cli.output import Column, echo_json, table
from slurm_ext.core.energy import aggregate, totals

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


ENERGY_COLUMNS = (
    Column("JOBID", "job_id", right=True),
    Column("USER", "user", width=10),
    Column("GPU-TIME", "gpu_seconds", _fmt_s, right=True),
    Column("GPU kJ", "gpu_energy_j", lambda v: f"{v / 1000:.1f}", right=True),
    Column("GPU kWh", "gpu_energy_kwh", lambda v: f"{v:.3f}", right=True),
    Column("CPU kJ", "cpu_energy_j", lambda v: f"{v / 1000:.1f}", right=True),
    Column("UTIL", "gpu_util_mean", lambda v: f"{v:.0%}", right=True),
    Column("PEAK", "gpu_util_peak", lambda v: f"{v:.0%}", right=True),
    Column("MEM GiB", "gpu_mem_peak_bytes", lambda v: f"{v / 2**30:.1f}", right=True),
    Column("NODES", "nodes"),
)


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
    store = open_store(cfg, readonly=True)
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
        echo_json({"jobs": [asdict(j) for j in jobs], "totals": total})
        return
    rows = [
        {**asdict(j), "nodes": ",".join(j.nodes) + ("" if j.final else " (running)")} for j in jobs
    ]
    click.echo(table(rows, ENERGY_COLUMNS))
    click.echo(
        f"total: {total['jobs']} jobs, {_fmt_s(total['gpu_seconds'])} GPU-time, "
        f"GPU {total['gpu_energy_j'] / 1000:.1f} kJ ({total['gpu_energy_kwh']:.3f} kWh), "
        f"CPU {total['cpu_energy_j'] / 1000:.1f} kJ"
    )
