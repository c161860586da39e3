"""`slurm-ext serve | pin | unpin`: run the service, and the admin's writes to its store.

The read-only commands (queue, explain, nodes) are in `cli.inspect`.

Exit statuses of `serve`: 0 stopped, 1 a failed `--once` pass or an unreadable store,
2 a configuration error (a bad `listen` or `port` too: no such address on this host, a
privileged port), 3 another service holds this store, 75 (EX_TEMPFAIL) the listener's
port stayed taken for PORT_WAIT_S: restarting cannot fix 2 or 3, and
etc/slurm-ext.service tells systemd not to; it restarts on 1 and 75.
"""

from __future__ import annotations

import errno
import getpass
import logging
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click

from slurm_ext.cli.options import (
    EXIT_CONFIG,
    config_file,
    config_option,
    load_service_classes,
    load_service_config,
    open_store,
    private_data,
    service_client,
)
from slurm_ext.cli.output import echo_safe
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store, StoreError
from slurm_ext.store.lock import StoreLocked, lock_store

EXIT_ALREADY_RUNNING = 3
EXIT_PORT_TAKEN = 75  # EX_TEMPFAIL: the unit restarts the service (RestartSec)
PORT_WAIT_S = 60.0  # how long `serve` retries a taken port before it exits
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
    from slurm_ext.service.metrics import ServiceMetrics
    from slurm_ext.service.reachability import warn_if_reports_unreachable

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
        echo_safe(f"slurm-ext: {exc}", err=True)
        sys.exit(EXIT_ALREADY_RUNNING)
    except StoreError as exc:
        echo_safe(f"slurm-ext: {exc}", err=True)
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
        server, view = _start_listener(cfg, config_path, metrics, secret)
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


def _start_listener(cfg: ServiceConfig, config_path: str | None, metrics, secret):
    """(the listener, its user view); exits EXIT_CONFIG for a `listen` or `port` this
    host cannot serve, EXIT_PORT_TAKEN when the port stayed taken for PORT_WAIT_S."""
    from slurm_ext.service.listener import ListenAddressError, SlurmJobNodes, bind_retrying
    from slurm_ext.service.metrics import serve_http
    from slurm_ext.userview.http import UserView
    from slurm_ext.userview.privacy import view_mode

    client = service_client(cfg)  # its own: the HTTP workers must not share the pass's
    privacy = view_mode(cfg.user_view, private_data(client) if cfg.user_view == "auto" else None)
    view = UserView(cfg.store, privacy)  # its refresher thread starts here
    try:
        server = bind_retrying(
            lambda: serve_http(
                cfg.listen,
                cfg.port,
                metrics,
                secret,
                lambda r: _save_reports(cfg.store, r),
                job_nodes=SlurmJobNodes(client),
                view=view,
            ),
            PORT_WAIT_S,
        )
    except (ListenAddressError, OSError) as exc:
        view.close()
        _listen_failed(cfg, config_path, exc)
    log.info(
        "metrics, reports and the user view (%s%s) on http://%s:%d",
        privacy,
        " from Slurm's PrivateData" if cfg.user_view == "auto" else "",
        cfg.listen,
        server.server_address[1],
    )
    return server, view


def _listen_failed(cfg: ServiceConfig, config_path: str | None, exc: Exception) -> NoReturn:
    """Say why the listener cannot start, and exit with the status that tells systemd
    whether a restart can help."""
    from slurm_ext.service.listener import ListenAddressError

    where = config_file(config_path) or "the built-in defaults"
    if isinstance(exc, ListenAddressError):
        value = cfg.listen if exc.key == "listen" else cfg.port
        echo_safe(f"slurm-ext: config error: {where}: {exc.key} = {value!r}: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        echo_safe(
            f"slurm-ext: cannot listen on {cfg.listen}:{cfg.port}: another process held the "
            f"port for {PORT_WAIT_S:.0f} s (another service? `ss -ltnp` names it); exiting "
            f"with status {EXIT_PORT_TAKEN} for systemd to restart the service later",
            err=True,
        )
        sys.exit(EXIT_PORT_TAKEN)
    echo_safe(f"slurm-ext: cannot listen on {cfg.listen}:{cfg.port}: {exc}", err=True)
    sys.exit(1)


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
