"""`slurm-ext serve | pin | unpin`: run the service, and the admin's writes to its store.

The read-only commands (queue, explain, nodes) are in `cli.inspect`.

Exit statuses of `serve`: 0 stopped, 1 a failed `--once` pass or an unreadable store,
2 a configuration error, 3 another service holds this store (or the port): restarting
cannot fix 2 or 3, and etc/slurm-ext.service tells systemd not to.
"""

from __future__ import annotations

import errno
import getpass
import logging
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from slurm_ext.cli.options import (
    EXIT_CONFIG,
    config_option,
    load_service_classes,
    load_service_config,
    open_store,
    service_client,
)
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store, StoreError
from slurm_ext.store.lock import StoreLocked, lock_store

EXIT_ALREADY_RUNNING = 3
log = logging.getLogger("slurm_ext.service.loop")


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


@click.command()
@config_option
@click.option("--dry-run", is_flag=True, help="Compute and log decisions; write nothing to Slurm.")
@click.option("--once", is_flag=True, help="Run one pass and exit (status 1 if Slurm failed).")
def serve(config_path: str | None, dry_run: bool, once: bool) -> None:
    """Run the priority service beside slurmctld."""
    from slurm_ext.core.reports import SecretFileError, read_secret
    from slurm_ext.service.listener import SlurmJobNodes
    from slurm_ext.service.metrics import ServiceMetrics, serve_http
    from slurm_ext.service.reachability import warn_if_reports_unreachable
    from slurm_ext.userview.http import UserView

    cfg = load_service_config(config_path)
    classes = load_service_classes(cfg)
    if not logging.getLogger().handlers or logging.getLogger().level > logging.INFO:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            force=True,
        )
    warn_if_reports_unreachable(cfg)
    try:
        lock = lock_store(cfg.store)
    except StoreLocked as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(EXIT_ALREADY_RUNNING)
    except StoreError as exc:
        click.echo(f"slurm-ext: {exc}", err=True)
        sys.exit(1)
    store = open_store(cfg, readonly=False)
    metrics = ServiceMetrics()
    secret = None
    if cfg.report_secret_file:
        try:
            secret = read_secret(cfg.report_secret_file)
        except SecretFileError as exc:
            click.echo(
                f"slurm-ext: config error: {config_path}: report_secret_file: {exc}", err=True
            )
            sys.exit(EXIT_CONFIG)
    server = view = None
    if cfg.port and not once:
        view = UserView(cfg.store, cfg.user_view)  # its refresher thread starts here
        try:
            server = serve_http(
                cfg.listen,
                cfg.port,
                metrics,
                secret,
                lambda r: _save_reports(cfg.store, r),
                # its own client: the HTTP workers must not share the pass's (pyslurm)
                job_nodes=SlurmJobNodes(service_client(cfg)),
                view=view,
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
        log.info(
            "metrics, reports and the user view (%s) on http://%s:%d",
            cfg.user_view,
            cfg.listen,
            server.server_address[1],
        )
    service = Service(cfg, service_client(cfg), store, dry_run, metrics, classes)
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
        if view is not None:
            view.close()
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
