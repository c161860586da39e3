"""`slurm-ext queue | explain | nodes`: what the service decided and why, read-only.

They read the store in one short snapshot before asking Slurm, so a slow Slurm never
holds the store open, and non-admin users can run them (the store is readable by the
service's group); with `--server URL` they ask the service's read-only user view instead
(login nodes that cannot read the store).
"""

from __future__ import annotations

import sys
import time

import click

from slurm_ext.cli.options import (
    EXIT_CONFIG,
    config_option,
    json_option,
    load_service_config,
    open_store,
    service_client,
)
from slurm_ext.cli.output import Column, duration, echo_json, table
from slurm_ext.core.model import JobState
from slurm_ext.policy import fragmentation
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.slurm import SlurmError
from slurm_ext.userview.rows import (
    ViewError,
    explain_info,
    fetch_json,
    node_rows,
    queue_row,
    slurm_reason,
    sort_rows,
)

QUEUE_COLUMNS = (
    Column("RANK", "rank", right=True),
    Column("JOBID", "job_id", right=True),
    Column("USER", "user", width=10),
    Column("ST", "state_code"),
    Column("GPUS", "gpus", right=True),
    Column("Q", "queue", right=True),
    Column("GITTINS", "gittins", lambda v: format(v, ".3g"), right=True),
    Column("ATTAINED", "attained_gpu_s", duration, right=True),
    Column("WAIT", "wait_s", duration, right=True),
    Column("TIME", "run_s", duration, right=True),
    Column("SET", "value_set", right=True),
    Column("SLURM_PRIO", "slurm_priority", right=True),
    Column("REASON", "reason_shown"),
)


server_option = click.option(
    "--server",
    metavar="URL",
    default=None,
    help="Ask the service's read-only view at URL (http://HOST:PORT) instead of reading "
    "its store and Slurm here: for login nodes.",
)


def _from_server(server: str, path: str) -> dict:
    """The view's JSON document at `path`, or exit 1 with the server's reason (a 404 says
    whether the job is unknown or the view is off)."""
    try:
        return fetch_json(server, path)
    except ViewError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)


@click.command()
@config_option
@json_option
@server_option
@click.option(
    "--all", "show_all", is_flag=True, help="Include jobs outside the managed partitions."
)
def queue(config_path: str | None, as_json: bool, server: str | None, show_all: bool) -> None:
    """Pending and running jobs in the service's order, with what Slurm shows."""
    if server and show_all:
        click.echo(
            "slurm-ext: --all needs the store and Slurm here; the server's view lists the "
            "jobs the service ranks (its partitions)",
            err=True,
        )
        sys.exit(EXIT_CONFIG)
    if server:
        doc = _from_server(server, "/v1/queue")
        rows, last = doc.get("jobs", []), doc.get("last_pass")
    else:
        rows, last = _local_queue(load_service_config(config_path), show_all)
    if as_json:
        echo_json({"jobs": rows, "last_pass": last})
        return
    shown = [
        {**x, "reason_shown": x["reason"] + (" (promoted)" if x["promoted"] else "")} for x in rows
    ]
    click.echo(table(shown, QUEUE_COLUMNS))
    if last:
        click.echo(
            f"last pass {duration(time.time() - last['started_at'])} ago: {last['ranked']} ranked, {last['writes']} writes, {last['errors']} errors{' (dry run)' if last['dry_run'] else ''}"
        )


def _local_queue(cfg: ServiceConfig, show_all: bool) -> tuple[list[dict], dict | None]:
    """Rows from the store and, for what Slurm shows now, from Slurm."""
    store = open_store(cfg, readonly=True)
    with store.snapshot():
        decisions, records, last = store.decisions(), store.jobs(), store.last_pass()
    store.close()
    try:
        jobs = service_client(cfg).jobs()
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    now = time.time()
    rows = []
    for j in jobs:
        managed = not cfg.partitions or j.partition in cfg.partitions
        if not managed and not show_all:
            continue
        started = j.start_time if j.start_time and j.state != JobState.PENDING else None
        rows.append(
            queue_row(
                decisions.get(j.job_id),
                records.get(j.job_id),
                now,
                job_id=j.job_id,
                user=j.user,
                state=j.state.value,
                state_code=j.state.code,
                gpus=j.gpus,
                wait_s=round((started or now) - j.submit_time, 1) if j.submit_time else None,
                run_s=round(now - started, 1) if started else None,
                mode=cfg.mode,
                slurm_priority=j.priority,
                reason=slurm_reason(j.reason),
            )
        )
    return sort_rows(rows), last


@click.command()
@config_option
@json_option
@server_option
@click.argument("job_id", type=int)
def explain(config_path: str | None, as_json: bool, server: str | None, job_id: int) -> None:
    """Why this job has its rank, why it is not running, where it was placed."""
    if server:
        info = _from_server(server, f"/v1/jobs/{job_id}")
    else:
        info = _local_explain(load_service_config(config_path), job_id)
    if as_json:
        echo_json(info)
        return
    prio = "-" if info["slurm_priority"] is None else info["slurm_priority"]
    click.echo(
        f"job {job_id}: {info['slurm_state']} (Slurm reason: {info['slurm_reason'] or '-'}, priority {prio})"
    )
    if not info["managed"]:
        click.echo("  not ranked: outside the service's partitions, or not seen by a pass yet")
    if info["pinned"]:
        click.echo("  pinned by an admin: the service never changes it")
    if info["held"]:
        click.echo("  held: the service does not touch held jobs")
    rank = "-" if info["rank"] is None else info["rank"]
    queue_ = "-" if info["queue"] is None else info["queue"]
    click.echo(f"  rank {rank} in queue {queue_}: {info['policy_reason']}")
    click.echo(
        f"  attained service {duration(info['attained_gpu_s'])} GPU-time; "
        + (
            f"running for {duration(info['current_run_s'])}"
            if info["current_run_s"] is not None
            else f"last run stint {duration(info['last_run_s'])}"
        )
    )
    if info.get("wait_s") is not None and info["current_run_s"] is None:
        click.echo(f"  waiting for {duration(info['wait_s'])} since it was submitted")
    if info["value_set"] is not None:
        click.echo(f"  {(info['mode'] or 'value').replace('_', ' ')} set to {info['value_set']}")
    if info["placement"]:
        click.echo(f"  placement hint: ReqNodeList={','.join(info['placement'])}")


def _local_explain(cfg: ServiceConfig, job_id: int) -> dict:
    """The explanation from the store and, for what Slurm shows now, from Slurm."""
    store = open_store(cfg, readonly=True)
    with store.snapshot():
        d, rec, pinned = store.decisions().get(job_id), store.job(job_id), job_id in store.pins()
    store.close()
    try:
        job = next((j for j in service_client(cfg).jobs() if j.job_id == job_id), None)
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    if job is None and d is None and rec is None:
        click.echo(f"slurm-ext: job {job_id} is unknown to Slurm and to the service", err=True)
        sys.exit(1)
    return explain_info(
        job_id,
        d,
        rec,
        pinned,
        time.time(),
        slurm_state=job.state.value if job else "GONE",
        slurm_reason=slurm_reason(job.reason) if job else "",
        slurm_priority=job.priority if job else None,
        managed=bool(job and (not cfg.partitions or job.partition in cfg.partitions)),
        held=bool(job and job.held),
        mode=cfg.mode,
    )


NODE_COLUMNS = (
    Column("NODE", "node"),
    Column("STATE", "state", width=14),
    Column("GPUS", "gpus", right=True),
    Column("USED", "gpus_used", right=True),
    Column("FREE", "gpus_free", right=True),
    Column("CPUS", "cpus", right=True),
    Column("USED", "cpus_used", right=True),
)


@click.command()
@config_option
@json_option
def nodes(config_path: str | None, as_json: bool) -> None:
    """GPUs free and used per node, and how fragmented the free GPUs are."""
    cfg = load_service_config(config_path)
    try:
        ns = service_client(cfg).nodes()
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    frag = fragmentation(ns)
    rows = node_rows(ns, with_cpus=True)
    if as_json:
        echo_json({"nodes": rows, "fragmentation": frag})
        return
    click.echo(table(rows, NODE_COLUMNS))
    total_free = sum(r["gpus_free"] for r in rows)
    click.echo(
        f"free GPUs {total_free}; fragmentation {frag:.2f} (share of free GPUs on partly used nodes)"
    )
