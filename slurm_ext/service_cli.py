"""`slurm-ext serve | queue | explain | nodes | pin | unpin`: run and inspect the service.

The inspection commands read the store read-only and Slurm through the same client, so
non-admin users can run them; only `serve`, `pin` and `unpin` write. They read the store
in one short snapshot before asking Slurm, so a slow Slurm never holds the store open.

Exit statuses of `serve`: 0 stopped, 1 a failed `--once` pass or an unreadable store,
2 a configuration error, 3 another service holds this store (or the port): restarting
cannot fix 2 or 3, and etc/slurm-ext.service tells systemd not to.
"""

from __future__ import annotations

import errno
import getpass
import json
import logging
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from slurm_ext.config import ConfigError, load_config
from slurm_ext.policy import fragmentation
from slurm_ext.service import Service, ServiceConfig
from slurm_ext.slurm import SlurmError, make_client
from slurm_ext.store import Store, StoreError
from slurm_ext.store_lock import StoreLocked, lock_store

DEFAULT_CONFIG = "/etc/slurm-ext/service.toml"
EXIT_CONFIG = 2
EXIT_ALREADY_RUNNING = 3
log = logging.getLogger("slurm_ext.service")

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"service.toml (default {DEFAULT_CONFIG} if it exists, else built-in defaults).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def load_service_config(path: str | None) -> ServiceConfig:
    """The config, or exit 2 with a message naming the file and the key."""
    if path is None and Path(DEFAULT_CONFIG).is_file():
        path = DEFAULT_CONFIG
    try:
        return load_config(ServiceConfig, path)
    except ConfigError as exc:
        click.echo(f"slurm-ext: config error: {exc}", err=True)
        sys.exit(2)


def _client(cfg: ServiceConfig):
    try:
        return make_client(cfg.slurm.backend, cfg.slurm.slurm_conf, cfg.slurm.timeout_s)
    except (SlurmError, ValueError) as exc:
        click.echo(f"slurm-ext: cannot reach Slurm: {exc}", err=True)
        sys.exit(1)


@contextmanager
def _writable_store(cfg: ServiceConfig) -> Iterator[Store]:
    """The store for an admin's write (pin, unpin); a user who may not write it is told so."""
    try:
        store = Store(cfg.store)
        try:
            yield store
        finally:
            store.close()
    except (StoreError, sqlite3.Error) as exc:
        click.echo(
            f"slurm-ext: cannot write the store {cfg.store} ({exc}); pin and unpin need "
            "write access to it: run them as the service's user or root",
            err=True,
        )
        sys.exit(1)


def _store(cfg: ServiceConfig, readonly: bool) -> Store:
    try:
        return Store(cfg.store, readonly=readonly)
    except StoreError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)


@click.command()
@config_option
@click.option("--dry-run", is_flag=True, help="Compute and log decisions; write nothing to Slurm.")
@click.option("--once", is_flag=True, help="Run one pass and exit (status 1 if Slurm failed).")
def serve(config_path: str | None, dry_run: bool, once: bool) -> None:
    """Run the priority service beside slurmctld."""
    from slurm_ext.metrics import ServiceMetrics, serve_http
    from slurm_ext.report_listener import SlurmJobNodes
    from slurm_ext.reports import SecretFileError, read_secret

    cfg = load_service_config(config_path)
    if not logging.getLogger().handlers or logging.getLogger().level > logging.INFO:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            force=True,
        )
    try:
        lock = lock_store(cfg.store)
    except StoreLocked as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(EXIT_ALREADY_RUNNING)
    except StoreError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    store = _store(cfg, readonly=False)
    metrics = ServiceMetrics()
    secret = None
    if cfg.report_secret_file:
        try:
            secret = read_secret(cfg.report_secret_file)
        except SecretFileError as exc:
            click.echo(
                f"slurm-ext: config error: {config_path}: report_secret_file: {exc}", err=True
            )
            sys.exit(2)
    server = None
    if cfg.port and not once:
        try:
            server = serve_http(
                cfg.listen,
                cfg.port,
                metrics,
                secret,
                lambda r: _save_reports(cfg.store, r),
                # its own client: the HTTP workers must not share the pass's (pyslurm)
                job_nodes=SlurmJobNodes(_client(cfg)),
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            click.echo(
                f"slurm-ext: cannot listen on {cfg.listen}:{cfg.port}: another process holds "
                "the port (another service with another store?); set port in the config",
                err=True,
            )
            sys.exit(EXIT_ALREADY_RUNNING)
        log.info("metrics and reports on http://%s:%d", cfg.listen, server.server_address[1])
    service = Service(cfg, _client(cfg), store, dry_run=dry_run, metrics=metrics)
    log.info(
        "service: policy=%s mode=%s interval=%.0fs store=%s%s",
        cfg.policy.policy,
        cfg.mode,
        cfg.interval_s,
        cfg.store,
        " DRY RUN" if dry_run else "",
    )
    try:
        rc = service.serve(once=once)
    finally:
        if server is not None:
            server.shutdown()
        store.close()
        lock.close()
    sys.exit(rc)


def _save_reports(path: str, reports) -> int:
    """Called on the HTTP thread: SQLite connections stay in the thread that made them."""
    store = Store(path)
    try:
        return store.add_reports(reports)
    finally:
        store.close()


def _fmt_gpu_s(v: float) -> str:
    return f"{v / 3600:.1f}h" if v >= 3600 else f"{v:.0f}s"


@click.command()
@config_option
@json_option
@click.option(
    "--all", "show_all", is_flag=True, help="Include jobs outside the managed partitions."
)
def queue(config_path: str | None, as_json: bool, show_all: bool) -> None:
    """Pending and running jobs in the service's order, with what Slurm shows."""
    cfg = load_service_config(config_path)
    store = _store(cfg, readonly=True)
    with store.snapshot():
        decisions, records, last = store.decisions(), store.jobs(), store.last_pass()
    store.close()
    try:
        jobs = _client(cfg).jobs()
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    now = time.time()
    rows = []
    for j in jobs:
        managed = not cfg.partitions or j.partition in cfg.partitions
        if not managed and not show_all:
            continue
        d, r = decisions.get(j.job_id), records.get(j.job_id)
        rows.append(
            {
                "job_id": j.job_id,
                "user": j.user,
                "state": j.state.value,
                "gpus": j.gpus,
                "rank": d.rank if d else None,
                "queue": d.queue if d else None,
                "gittins": d.gittins if d else None,
                "attained_gpu_s": round(r.attained_gpu_s(now), 1) if r else 0.0,
                "value_set": d.value if d else None,
                "mode": cfg.mode,
                "slurm_priority": j.priority,
                "reason": j.reason,
                "promoted": bool(d and d.promoted),
            }
        )
    rows.sort(
        key=lambda x: (x["rank"] is None, x["rank"] if x["rank"] is not None else x["job_id"])
    )
    if as_json:
        click.echo(json.dumps({"jobs": rows, "last_pass": last}, indent=1))
        return
    click.echo(
        f"{'RANK':>4} {'JOBID':>8} {'USER':<10} {'ST':<4} {'GPUS':>4} {'Q':>2} {'GITTINS':>9} {'ATTAINED':>9} {'SET':>9} {'SLURM_PRIO':>10} REASON"
    )
    for x in rows:
        click.echo(
            f"{'' if x['rank'] is None else x['rank']:>4} {x['job_id']:>8} {x['user'][:10]:<10} {x['state'][:4]:<4} {x['gpus']:>4} "
            f"{'' if x['queue'] is None else x['queue']:>2} {'' if x['gittins'] is None else format(x['gittins'], '.3g'):>9} "
            f"{_fmt_gpu_s(x['attained_gpu_s']):>9} {'' if x['value_set'] is None else x['value_set']:>9} {x['slurm_priority']:>10} "
            f"{x['reason']}{' (promoted)' if x['promoted'] else ''}"
        )
    if last:
        click.echo(
            f"last pass {time.time() - last['started_at']:.0f}s ago: {last['ranked']} ranked, {last['writes']} writes, {last['errors']} errors{' (dry run)' if last['dry_run'] else ''}"
        )


@click.command()
@config_option
@json_option
@click.argument("job_id", type=int)
def explain(config_path: str | None, as_json: bool, job_id: int) -> None:
    """Why this job has its rank, why it is not running, where it was placed."""
    cfg = load_service_config(config_path)
    store = _store(cfg, readonly=True)
    with store.snapshot():
        d, rec, pinned = store.decisions().get(job_id), store.job(job_id), job_id in store.pins()
    store.close()
    try:
        job = next((j for j in _client(cfg).jobs() if j.job_id == job_id), None)
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    if job is None and d is None and rec is None:
        click.echo(f"slurm-ext: job {job_id} is unknown to Slurm and to the service", err=True)
        sys.exit(1)
    now = time.time()
    info = {
        "job_id": job_id,
        "slurm_state": job.state.value if job else "GONE",
        "slurm_reason": job.reason if job else "",
        "slurm_priority": job.priority if job else None,
        "managed": bool(job and (not cfg.partitions or job.partition in cfg.partitions)),
        "pinned": pinned,
        "held": bool(job and job.held),
        "rank": d.rank if d else None,
        "queue": d.queue if d else None,
        "gittins": d.gittins if d else None,
        "promoted": bool(d and d.promoted),
        "policy_reason": d.reason if d else "not ranked yet (no pass since it appeared)",
        "value_set": d.value if d else None,
        "mode": cfg.mode,
        "placement": list(d.placement) if d and d.placement else None,
        "attained_gpu_s": rec.attained_gpu_s(now) if rec else 0.0,
        "last_run_s": rec.last_run_s if rec else 0.0,
        "current_run_s": (now - rec.run_start) if rec and rec.run_start is not None else None,
    }
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(
        f"job {job_id}: {info['slurm_state']} (Slurm reason: {info['slurm_reason'] or '-'}, priority {info['slurm_priority']})"
    )
    if not info["managed"]:
        click.echo("  not managed: its partition is outside the service's partitions")
    if info["pinned"]:
        click.echo("  pinned by an admin: the service never changes it")
    if info["held"]:
        click.echo("  held: the service does not touch held jobs")
    click.echo(f"  rank {info['rank']} in queue {info['queue']}: {info['policy_reason']}")
    click.echo(
        f"  attained service {_fmt_gpu_s(info['attained_gpu_s'])} GPU-time; "
        + (
            f"running for {info['current_run_s']:.0f}s"
            if info["current_run_s"] is not None
            else f"last run stint {info['last_run_s']:.0f}s"
        )
    )
    if info["value_set"] is not None:
        click.echo(f"  {cfg.mode.replace('_', ' ')} set to {info['value_set']}")
    if info["placement"]:
        click.echo(f"  placement hint: ReqNodeList={','.join(info['placement'])}")


@click.command()
@config_option
@json_option
def nodes(config_path: str | None, as_json: bool) -> None:
    """GPUs free and used per node, and how fragmented the free GPUs are."""
    cfg = load_service_config(config_path)
    try:
        ns = _client(cfg).nodes()
    except SlurmError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    frag = fragmentation(ns)
    rows = [
        {
            "node": n.name,
            "state": n.state,
            "gpus": n.gpus,
            "gpus_used": n.gpus_alloc,
            "gpus_free": n.gpus_free,
            "gpu_type": n.gpu_type,
            "cpus": n.cpus,
            "cpus_used": n.cpus_alloc,
        }
        for n in sorted(ns, key=lambda n: n.name)
    ]
    if as_json:
        click.echo(json.dumps({"nodes": rows, "fragmentation": frag}, indent=1))
        return
    click.echo(
        f"{'NODE':<12} {'STATE':<14} {'GPUS':>4} {'USED':>4} {'FREE':>4} {'CPUS':>5} {'USED':>5}"
    )
    for r in rows:
        click.echo(
            f"{r['node']:<12} {r['state'][:14]:<14} {r['gpus']:>4} {r['gpus_used']:>4} {r['gpus_free']:>4} {r['cpus']:>5} {r['cpus_used']:>5}"
        )
    total_free = sum(r["gpus_free"] for r in rows)
    click.echo(
        f"free GPUs {total_free}; fragmentation {frag:.2f} (share of free GPUs on partly used nodes)"
    )


@click.command()
@config_option
@click.argument("job_id", type=int)
def pin(config_path: str | None, job_id: int) -> None:
    """Never let the service change this job again (until unpinned)."""
    cfg = load_service_config(config_path)
    with _writable_store(cfg) as store:
        store.pin(job_id, getpass.getuser())
    click.echo(f"job {job_id} pinned: the service will not change it")


@click.command()
@config_option
@click.argument("job_id", type=int)
def unpin(config_path: str | None, job_id: int) -> None:
    """Let the service manage this job again."""
    cfg = load_service_config(config_path)
    with _writable_store(cfg) as store:
        removed = store.unpin(job_id)
    click.echo(f"job {job_id} unpinned" if removed else f"job {job_id} was not pinned")
