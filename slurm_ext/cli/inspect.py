"""`slurm-ext queue | explain | nodes`: what the service decided and why, read-only.

They read the store in one short snapshot before asking Slurm, so a slow Slurm never
holds the store open, and non-admin users can run them (the store is readable by the
service's group); with `--server URL` they ask the service's read-only user view instead
(login nodes that cannot read the store), through slurm_ext/userview/client.py: a
server that cannot be read, or whose answer is not the view's, is one error line and
exit status 2 (EXIT_SERVER); a 404 (no such job) is exit status 1, as locally.

What Slurm hides, they hide: `queue` lists the jobs Slurm shows the caller, and
`explain` of a job Slurm does not show the caller (PrivateData=jobs, or ended) shows
its user and history group only to its owner or root, unless `user_view = "full"`
(userview/privacy.py). Every string from Slurm, the store or a server goes to the
terminal through cli.output.safe.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

import click

from slurm_ext.cli.options import (
    CLIENT_CONFIG,
    EXIT_CONFIG,
    SERVER_ENV,
    config_option,
    default_server,
    json_option,
    load_service_config,
    open_store,
    private_data,
    service_client,
)
from slurm_ext.cli.output import Column, duration, echo_json, echo_safe, table
from slurm_ext.core.model import JobState
from slurm_ext.policy import fragmentation, reason_words
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.slurm import SlurmError
from slurm_ext.store.db import Store
from slurm_ext.userview.privacy import anonymous, view_mode
from slurm_ext.userview.rows import (
    Waiting,
    explain_info,
    free_gpus_by_pool,
    node_rows,
    queue_row,
    slurm_reason,
    sort_rows,
)

EXIT_SERVER = 2  # the --server view could not be read (cf. EXIT_CONFIG: also 2)

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


def _from_server(server: str, job_id: int | None = None) -> dict:
    """The checked queue (job_id None) or job from the view at `server`, or one error
    line and exit 1 for a 404 (whether the job is unknown or the view is off),
    EXIT_SERVER for anything else."""
    from slurm_ext.userview import client  # h11: only the --server path needs it

    try:
        if job_id is None:
            return client.fetch_queue(server, deadline_s=client.DEADLINE_S)
        return client.fetch_job(server, job_id, deadline_s=client.DEADLINE_S)
    except client.ViewError as exc:
        echo_safe(f"slurm-ext: {exc}", err=True)
        sys.exit(1 if isinstance(exc, client.ViewNotFound) else EXIT_SERVER)


@click.command()
@config_option
@json_option
@server_option
@click.option(
    "--all", "show_all", is_flag=True, help="Include jobs outside the managed partitions."
)
@click.option("--me", is_flag=True, help="Only your jobs.")
@click.option("-u", "--user", "users", metavar="USER[,USER]", help="Only these users' jobs.")
@click.option(
    "-p", "--partition", "partitions", metavar="PARTITION[,PARTITION]",
    help="Only jobs in these partitions.",
)  # fmt: skip
def queue(
    config_path: str | None,
    as_json: bool,
    server: str | None,
    show_all: bool,
    me: bool,
    users: str | None,
    partitions: str | None,
) -> None:
    """Pending and running jobs in the service's order, with what Slurm shows."""
    if server and show_all:
        click.echo(
            "slurm-ext: --all needs the store and Slurm here; the server's view lists the "
            "jobs the service ranks (its partitions)",
            err=True,
        )
        sys.exit(EXIT_CONFIG)
    if not show_all:  # --all reads the store here, whatever the defaults name
        server = default_server(server, config_path)
    wanted = _names(users) | ({_caller()} if me else set())
    if server:
        doc = _from_server(server)
        rows, last = doc["jobs"], doc["last_pass"]
        if wanted and any(not r["user"] for r in rows):
            echo_safe(
                f"slurm-ext: {server} shows no user names (Slurm hides them): --me and "
                "--user cannot pick your jobs there; find yours by job id "
                "(slurm-ext explain JOBID)",
                err=True,
            )
            sys.exit(EXIT_SERVER)
    else:
        rows, last = _local_queue(load_service_config(config_path), show_all)
    rows = only(rows, wanted, _names(partitions))
    if as_json:
        echo_json({"jobs": rows, "last_pass": last})
        return
    shown = [
        {**x, "reason_shown": x["reason"] + (" (promoted)" if x["promoted"] else "")} for x in rows
    ]
    click.echo(table(shown, QUEUE_COLUMNS))
    if last:
        echo_safe(
            f"last pass {duration(time.time() - last['started_at'])} ago: {last['ranked']} ranked, {last['writes']} writes, {last['errors']} errors{' (dry run)' if last['dry_run'] else ''}"
        )


def _names(text: str | None) -> set[str]:
    """The names of a comma-separated option (squeue's -u and -p take such lists)."""
    return {n.strip() for n in (text or "").split(",") if n.strip()}


def only(rows: list[dict], users: set[str], partitions: set[str]) -> list[dict]:
    """The rows of these users and of jobs in these partitions (an empty set: any); a job
    pending in several partitions ("gpu,debug") is in each."""
    return [
        r
        for r in rows
        if (not users or r["user"] in users)
        and (not partitions or partitions & set(r["partition"].split(",")))
    ]


def _local_queue(cfg: ServiceConfig, show_all: bool) -> tuple[list[dict], dict | None]:
    """Rows from the store and, for what Slurm shows now, from Slurm."""
    store = _open_store(cfg)
    with store.snapshot():
        decisions, records, last = store.decisions(), store.jobs(), store.last_pass()
    store.close()
    try:
        jobs = service_client(cfg).jobs()
    except SlurmError as exc:
        echo_safe(f"slurm-ext: {exc}", err=True)
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
                partition=j.partition,
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
    server = default_server(server, config_path)
    if server:
        info = _from_server(server, job_id)
    else:
        info = _local_explain(load_service_config(config_path), job_id)
    if as_json:
        echo_json(info)
        return
    for line in explain_lines(job_id, info):
        echo_safe(line)


def explain_lines(job_id: int, info: dict) -> list[str]:
    """What `explain` prints, one line each (the caller makes them safe to print)."""
    prio = "-" if info["slurm_priority"] is None else info["slurm_priority"]
    lines = [
        f"job {job_id}: {info['slurm_state']} (Slurm reason: {info['slurm_reason'] or '-'}, priority {prio})"
    ]
    if not info["managed"]:
        lines.append("  not ranked: outside the service's partitions, or not seen by a pass yet")
    if info["pinned"]:
        lines.append("  pinned by an admin: the service never changes it")
    if info["held"]:
        lines.append("  held: the service does not touch held jobs")
    if info["slurm_state"] == "PENDING" and info["slurm_reason"]:
        lines.append(f"  Slurm: it {reason_words(info['slurm_reason'])}")
    rank = "-" if info["rank"] is None else info["rank"]
    queue_ = "-" if info["queue"] is None else info["queue"]
    lines.append(f"  rank {rank} in queue {queue_}: {info['policy_reason']}")
    lines.append(
        f"  attained service {duration(info['attained_gpu_s'])} GPU-time; "
        + (
            f"running for {duration(info['current_run_s'])}"
            if info["current_run_s"] is not None
            else f"last run stint {duration(info['last_run_s'])}"
        )
    )
    if info.get("wait_s") is not None and info["current_run_s"] is None:
        lines.append(f"  waiting for {duration(info['wait_s'])} since it was submitted")
    if info["value_set"] is not None:
        lines.append(f"  {(info['mode'] or 'value').replace('_', ' ')} set to {info['value_set']}")
    if info["placement"]:
        lines.append(f"  placement hint: ReqNodeList={','.join(info['placement'])}")
    return lines


def _local_explain(cfg: ServiceConfig, job_id: int) -> dict:
    """The explanation from the store and, for what Slurm shows now, from Slurm."""
    store = _open_store(cfg)
    with store.snapshot():
        d, rec, pinned = store.decisions().get(job_id), store.job(job_id), job_id in store.pins()
    store.close()
    client = service_client(cfg)
    try:
        job = next((j for j in client.jobs() if j.job_id == job_id), None)
    except SlurmError as exc:
        echo_safe(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    if job is None and d is None and rec is None:
        click.echo(f"slurm-ext: job {job_id} is unknown to Slurm and to the service", err=True)
        sys.exit(1)
    info = explain_info(
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
    # Slurm showed the caller this job (so its user and name too), or the caller owns it
    if job is not None or rec is None or rec.user == _caller() or os.getuid() == 0:
        return info
    setting = cfg.user_view if cfg.user_view != "off" else "anonymous"
    if view_mode(setting, None if setting != "auto" else private_data(client)) == "full":
        return info
    return anonymous(info)


def _open_store(cfg: ServiceConfig) -> Store:
    """The store, read-only; where the caller cannot read it (a login node, or a user
    outside the service's group: the store is 0640), one sentence on how to ask the
    service's view instead, and exit 2."""
    if not os.access(cfg.store, os.R_OK):
        why = (
            "you cannot read the service's store"
            if os.path.exists(cfg.store)
            else "store not found here (has the service run yet?)"
        )
        echo_safe(
            f"slurm-ext: {cfg.store}: {why}; ask the service's view "
            f"instead: --server http://CONTROLLER:PORT, or set {SERVER_ENV}=http://CONTROLLER:PORT, "
            f'or server = "http://CONTROLLER:PORT" in {CLIENT_CONFIG} (your admin has the address)',
            err=True,
        )
        sys.exit(EXIT_SERVER)
    return open_store(cfg, readonly=True)


def _caller() -> str:
    """Who runs the command (by uid: $USER is the caller's to set)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


NODE_COLUMNS = (
    Column("NODE", "node"),
    Column("PARTITIONS", "partitions", width=12),
    Column("TYPE", "gpu_type"),
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
    """GPUs free and used per node, and free and fragmented GPUs per partition and GPU
    type (a job runs in one: free GPUs elsewhere do not help it)."""
    cfg = load_service_config(config_path)
    client = service_client(cfg)
    try:
        ns = client.nodes()
        waiting = [
            Waiting(j.partition, j.gpu_type, j.gpus)
            for j in client.jobs(states=("PENDING",))
            if j.gpus > 0
        ]
    except SlurmError as exc:
        echo_safe(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    frag = fragmentation(ns)
    rows = node_rows(ns, with_cpus=True)
    pools = free_gpus_by_pool(ns, waiting)
    if as_json:
        echo_json({"nodes": rows, "fragmentation": frag, "pools": pools})
        return
    click.echo(table(rows, NODE_COLUMNS))
    total_free = sum(r["gpus_free"] for r in rows)
    click.echo(
        f"free GPUs {total_free}; fragmentation {frag:.2f} (share of free GPUs on partly used nodes)"
    )
    for p in pools:
        echo_safe(
            f"  {p['partition'] or '-'} / {p['gpu_type'] or 'untyped'}: {p['free']} free, "
            f"{p['stranded']} on nodes that cannot take the widest job waiting there "
            f"({p['widest_waiting']} GPUs)"
        )
