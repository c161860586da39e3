"""`slurm-ext replay`: a trace replayed live on Slurm, per mode, against Slurm alone."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click

from slurm_ext.cli.options import (
    checkpoint_interval_option,
    json_option,
    load_policy,
    load_trace,
    policy_config_option,
    preemptible_fraction_option,
    seed_option,
    shape_options,
    trace_options,
)
from slurm_ext.cli.output import echo_fields, echo_json
from slurm_ext.policy import MODES as PLACEMENT_MODES
from slurm_ext.replay import target
from slurm_ext.replay.metrics import KEYS, add_ratios
from slurm_ext.replay.modes import ClusterSpec, ReplayOptions, replay_mode
from slurm_ext.replay.placement import PLACEMENT_KEYS
from slurm_ext.replay.plan import MODES, PlanError, auto_speedup, plan
from slurm_ext.replay.run import Interrupted, ReplayError


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.command()
@trace_options
@click.option(
    "--mode",
    "modes",
    default="slurm",
    show_default=True,
    help=f"Comma-separated modes, run in sequence on fresh clusters: {', '.join(MODES)}.",
)
@click.option(
    "--speedup",
    type=float,
    default=None,
    help="Trace seconds per wall second.  [default: fit the estimated makespan in 7 min]",
)
@checkpoint_interval_option(
    1800.0, "Trace seconds between a job's checkpoints (0: never; a requeue loses it all)."
)
@preemptible_fraction_option(
    0.0, "Share of jobs opted in to requeue besides the trace's checkpoint flag (service-requeue)."
)
@seed_option("Time limits and opt-ins.")
@shape_options(nodes=4, gpus_per_node=4)
@click.option(
    "--slurm-conf", type=click.Path(), default=None, help="Replay on this existing cluster."
)
@click.option("--partition", default=None, help="Its partition (required with --slurm-conf).")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep clusters, logs and checkpoints here.  [default: a temporary dir, removed]",
)
@policy_config_option(
    "TOML with PolicyConfig keys for the service (trace seconds; scaled for you)."
)
@click.option(
    "--placement-hints",
    type=click.Choice(PLACEMENT_MODES),
    default=None,
    help="Service modes: turn on the service's placement hints (ReqNodeList for jobs "
    "that can start now) in this placement mode.  [default: off, as shipped]",
)
@json_option
def replay(
    trace_path,
    fmt,
    skip_bad,
    modes,
    speedup,
    checkpoint_interval,
    preemptible_fraction,
    seed,
    nodes,
    gpus_per_node,
    slurm_conf,
    partition,
    workdir,
    config_path,
    placement_hints,
    as_json,
):
    """Replay a trace live on Slurm, time-compressed, and report `simulate`'s metrics."""
    names = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in names if m not in MODES]
    if not names or bad:
        raise click.BadParameter(
            f"unknown modes {bad} (choose from {', '.join(MODES)})", param_hint="--mode"
        )
    if slurm_conf and not partition:
        raise click.BadParameter("--slurm-conf needs --partition", param_hint="--partition")
    policy = load_policy(config_path)
    trace = load_trace(trace_path, fmt, skip_bad)
    if slurm_conf:
        try:
            tgt = target.existing(slurm_conf, partition)
        except target.TargetError as exc:
            raise click.ClickException(str(exc)) from exc
        nodes, gpus_per_node = tgt.nodes, tgt.gpus_per_node
    try:  # checks the width of every job before anything starts
        plan(trace.jobs, speedup or 1.0, nodes, gpus_per_node, "slurm")
    except PlanError as exc:
        raise click.ClickException(str(exc)) from exc
    if speedup is None:
        speedup = auto_speedup(trace.jobs, nodes * gpus_per_node)
    _say(f"replaying {len(trace.jobs)} jobs at speedup {speedup:.1f} in modes {', '.join(names)}")
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="slurm-ext-replay-"))
    rows: dict[str, dict] = {}
    options = ReplayOptions(
        speedup, checkpoint_interval, preemptible_fraction, seed, policy, placement_hints
    )
    cluster = ClusterSpec(nodes, gpus_per_node, slurm_conf, partition)
    # SIGTERM outside the submit loop (cluster start-up, service start) unwinds like
    # Ctrl-C, through every `finally` that stops what was started
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for mode in names:
            rows[mode] = replay_mode(trace.jobs, mode, root / mode, options, cluster)
    except (Interrupted, KeyboardInterrupt):
        _say("replay: interrupted; cancelled the jobs it submitted and stopped what it started")
        sys.exit(130)
    except (ReplayError, target.TargetError, PlanError) as exc:
        raise click.ClickException(
            f"{exc} (cancelled the jobs it submitted, stopped what it started)"
        ) from exc
    finally:
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
    add_ratios(rows)
    if as_json:
        echo_json(rows[names[0]] if len(names) == 1 else {"modes": rows})
        return
    for mode, row in rows.items():
        click.echo(f"== {mode}")
        echo_fields(
            {
                k: row[k]
                for k in (*KEYS, *PLACEMENT_KEYS, "vs_slurm", "speedup", "limit_stretch")
                if k in row
            }
        )
