"""Options more than one command declares, defined once, and the loaders behind them.

The service's commands (serve, queue, explain, nodes, pin, unpin, energy) share
`--config` (service.toml) and `--json`; `simulate` and `replay` share the trace, the
policy file and the job draws (`--preemptible-fraction`, `--checkpoint-interval`,
`--seed`) and the cluster shape. A loader turns a bad file into a clear error naming it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_ext.cli.output import safe
from slurm_ext.core.classes import load_classes
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.model import JobClasses
from slurm_ext.policy import PolicyConfig
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.sim.simjob import WILLRUN_STARTS
from slurm_ext.sim.traces import FORMATS, Trace, TraceError, read_trace
from slurm_ext.slurm import SlurmError, make_client
from slurm_ext.slurm.client import SlurmClient
from slurm_ext.store.db import Store, StoreError

log = logging.getLogger("slurm_ext.cli")
DEFAULT_CONFIG = "/etc/slurm-ext/service.toml"
EXIT_CONFIG = 2
# where `queue` and `explain` find the service's view when no --server is given
SERVER_ENV = "SLURM_EXT_SERVER"
CLIENT_CONFIG = "/etc/slurm-ext/client.toml"
CLIENT_CONFIG_ENV = "SLURM_EXT_CLIENT_CONFIG"  # another client.toml (tests, a user's own)

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"service.toml (default {DEFAULT_CONFIG} if it exists, else built-in defaults).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def config_file(path: str | None) -> str | None:
    """The service config a command reads: `path`, else DEFAULT_CONFIG if it exists,
    else None (built-in defaults)."""
    if path is None and Path(DEFAULT_CONFIG).is_file():
        return DEFAULT_CONFIG
    return path


def load_service_config(path: str | None) -> ServiceConfig:
    """The config, or exit 2 with a message naming the file and the key."""
    try:
        return load_config(ServiceConfig, config_file(path))
    except ConfigError as exc:
        click.echo(f"slurm-ext: config error: {safe(str(exc))}", err=True)
        sys.exit(EXIT_CONFIG)


@dataclass
class ClientConfig:
    """client.toml: what login-node commands read when they cannot read the store."""

    server: str = ""  # the service's view, http://HOST:PORT ("": none)


def default_server(server: str | None, config_path: str | None) -> str | None:
    """The view `queue` and `explain` ask: `server` (--server) if given; else none when
    --config names the service's own config (its store, here); else $SLURM_EXT_SERVER;
    else client.toml's `server` (exit 2 naming the file and key if it is bad); else
    none (the local store)."""
    if server or config_path is not None:
        return server or None
    if os.environ.get(SERVER_ENV):
        return os.environ[SERVER_ENV]
    path = os.environ.get(CLIENT_CONFIG_ENV) or CLIENT_CONFIG
    if not Path(path).is_file():
        return None
    try:
        cfg = load_config(ClientConfig, path)
        if cfg.server and not cfg.server.startswith(("http://", "https://")):
            raise ConfigError(path, "server", f"{cfg.server!r}: give http://HOST:PORT")
    except ConfigError as exc:
        click.echo(f"slurm-ext: config error: {safe(str(exc))}", err=True)
        sys.exit(EXIT_CONFIG)
    return cfg.server or None


def load_service_classes(cfg: ServiceConfig) -> JobClasses:
    """The co-location classes file the config names, or exit 2 naming it and the key."""
    try:
        return load_classes(cfg.classes_file)
    except ConfigError as exc:
        click.echo(f"slurm-ext: config error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)


def open_store(cfg: ServiceConfig, readonly: bool) -> Store:
    """The service's store, or exit 1 saying why it cannot be opened."""
    try:
        return Store(cfg.store, readonly=readonly)
    except StoreError as exc:
        click.echo(f"slurm-ext: {safe(str(exc))}", err=True)
        sys.exit(1)


# ---- simulate and replay -----------------------------------------------------------------
def trace_options(func: F) -> F:
    """--trace, --format, --skip-bad: the trace a command replays (read by `load_trace`)."""
    for option in reversed(
        (
            click.option(
                "--trace",
                "trace_path",
                required=True,
                type=click.Path(exists=True),
                help="Trace file (PAI: the job table or its directory).",
            ),
            click.option(
                "--format", "fmt", type=click.Choice(FORMATS), default="tiresias", show_default=True
            ),
            click.option(
                "--skip-bad", is_flag=True, help="Skip and count bad rows instead of stopping."
            ),
        )
    ):
        func = option(func)
    return func


def load_trace(path: str, fmt: str, skip_bad: bool) -> Trace:
    """The trace's jobs, or a clear error; the read's summary line (and an example of a
    skipped bad row) on stderr."""
    try:
        trace = read_trace(path, fmt, skip_bad=skip_bad)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(safe(trace.summary), err=True)
    if not trace.jobs:
        raise click.ClickException(f"{path}: no usable jobs")
    if trace.skipped:
        click.echo(f"skipped {trace.skipped} bad rows, e.g. {safe(trace.problems[0])}", err=True)
    return trace


def policy_config_option(help: str) -> Callable[[F], F]:
    """--config: the simulator's policy file (read by `load_policy`)."""
    return click.option("--config", "config_path", type=click.Path(), default=None, help=help)


def load_policy(path: str | None) -> PolicyConfig:
    """The simulator's policy file: `[policy]`'s keys, its `[tuning]` table, and the
    simulator-only keys of Slurm's own priority (docs/simulator.md)."""
    try:
        return load_config(PolicyConfig, path, simulator=True)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def shape_options(nodes: int, gpus_per_node: int) -> Callable[[F], F]:
    """--nodes, --gpus-per-node: the cluster's shape."""

    def decorate(func: F) -> F:
        func = click.option(
            "--gpus-per-node", type=click.IntRange(min=1), default=gpus_per_node, show_default=True
        )(func)
        return click.option(
            "--nodes", type=click.IntRange(min=1), default=nodes, show_default=True
        )(func)

    return decorate


def preemptible_fraction_option(default: float | None, help: str) -> Callable[[F], F]:
    return click.option(
        "--preemptible-fraction",
        type=click.FloatRange(0.0, 1.0),
        default=default,
        show_default=default is not None,
        help=help,
    )


def checkpoint_interval_option(default: float, help: str) -> Callable[[F], F]:
    return click.option(
        "--checkpoint-interval",
        type=click.FloatRange(min=0),
        default=default,
        show_default=True,
        help=help,
    )


def seed_option(help: str) -> Callable[[F], F]:
    return click.option("--seed", type=int, default=0, show_default=True, help=help)


def backfill_options(func: F) -> F:
    """--bf-window, --bf-interval, --bf-max-job-test, --bf-resolution: sched/backfill's
    settings, in seconds where Slurm's are in minutes, and how a reservation holds nodes;
    --sched-tick: the main scheduler's."""
    for option in reversed(
        (
            click.option(
                "--bf-window",
                type=click.FloatRange(min=0, min_open=True),
                default=86400.0,
                show_default=True,
                help="Seconds ahead backfill reserves for (Slurm's bf_window, which is in minutes).",
            ),
            click.option(
                "--bf-interval",
                type=click.FloatRange(min=0, min_open=True),
                default=30.0,
                show_default=True,
                help="Seconds between backfill passes (bf_interval).",
            ),
            click.option(
                "--bf-max-job-test",
                type=click.IntRange(min=1),
                default=500,
                show_default=True,
                help="Pending jobs one backfill pass looks at (bf_max_job_test).",
            ),
            click.option(
                "--bf-resolution",
                type=click.FloatRange(min=0, min_open=True),
                default=60.0,
                show_default=True,
                help="Seconds reservation times are rounded to (bf_resolution).",
            ),
            click.option(
                "--bf-willrun-window",
                type=click.FloatRange(min=0),
                default=0.0,
                show_default=True,
                help="cons_tres's will-run window: a blocked job's start is learnt from "
                "running jobs taken off in batches of it, doubling (Slurm: 30; 0: exact).",
            ),
            click.option(
                "--bf-willrun-start",
                type=click.Choice(WILLRUN_STARTS),
                default="nodes",
                show_default=True,
                help="The start a batch reports: the last end on the chosen nodes (Slurm "
                "25.11) or the batch's last end (22.05).",
            ),
            click.option(
                "--bf-whole-nodes/--bf-gpu-reservations",
                default=False,
                show_default=True,
                help="A blocked job's backfill reservation takes its nodes whole, as Slurm's "
                "backfill plans by node bitmap (default: only the GPUs it needs).",
            ),
            click.option(
                "--sched-tick",
                type=click.FloatRange(min=0),
                default=0.0,
                show_default=True,
                help="Seconds between the main scheduler's runs for submits (slurmctld: its "
                "next whole second, x speedup in a replay); a job end runs it at once. "
                "0: at each event.",
            ),
        )
    ):
        func = option(func)
    return func


def service_client(cfg: ServiceConfig) -> SlurmClient:
    """The Slurm client the service config names, or exit 1 saying why Slurm is out of reach."""
    try:
        return make_client(cfg.slurm.backend, cfg.slurm.slurm_conf, cfg.slurm.timeout_s)
    except (SlurmError, ValueError) as exc:
        click.echo(f"slurm-ext: cannot reach Slurm: {safe(str(exc))}", err=True)
        sys.exit(1)


def private_data(client: SlurmClient) -> frozenset[str] | None:
    """Slurm's PrivateData, or None (logged) when Slurm cannot say: callers then hide
    what it might hide (userview.privacy.view_mode)."""
    try:
        return client.private_data()
    except SlurmError as exc:
        log.warning("cannot read Slurm's PrivateData (user details stay hidden): %s", exc)
        return None
