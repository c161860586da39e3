"""`slurm-ext simulate`: a trace through one policy or several on a simulated cluster (slurm_ext.sim)."""

from __future__ import annotations

import csv
import math
import time
from dataclasses import replace

import click

from slurm_ext.cli.options import (
    backfill_options,
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
from slurm_ext.policy import POLICIES
from slurm_ext.policy import colocation as co
from slurm_ext.sim.coloc import ShareConfig
from slurm_ext.sim.coloc_run import mark_opportunistic, run_pair
from slurm_ext.sim.cpus import DEFAULT_KNEES
from slurm_ext.sim.engine import SCHEDULERS, SimConfig, SimulationStuck
from slurm_ext.sim.report import plot_cdf, table
from slurm_ext.sim.run import compare as run_compare
from slurm_ext.sim.run import simulate as run_one


def _progress():
    last = [0.0]

    def report(done: int, total: int, now: float) -> None:
        t = time.monotonic()
        if t - last[0] >= 2.0:
            last[0] = t
            click.echo(f"  {done}/{total} jobs done, simulated t={now / 3600:.1f} h", err=True)

    return report


def _read_history(path: str) -> list[float]:
    with open(path, newline="") as fh:
        rows = csv.DictReader(fh)
        col = "duration" if "duration" in (rows.fieldnames or []) else (rows.fieldnames or [""])[0]
        return [float(r[col]) for r in rows if r.get(col)]


def _parse_knees(items: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in items:
        model, sep, value = item.partition("=")
        try:
            knee = float(value)
        except ValueError:
            knee = math.nan
        if not sep or not model.strip() or not (math.isfinite(knee) and knee > 0):
            raise click.BadParameter(
                f"expected MODEL=CORES with CORES > 0, got {item!r}", param_hint="--cpu-knee"
            )
        out[model.strip()] = knee
    return out


def _needs_matplotlib(ctx: click.Context, param: click.Parameter, value: str | None):
    """--plot is checked when the options are read, not after a long simulation."""
    if value is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise click.BadParameter(
                f"needs matplotlib ({exc}); install it with pip install 'slurm-ext[plot]'"
            ) from exc
    return value


@click.command()
@trace_options
@shape_options(nodes=8, gpus_per_node=8)
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default=None,
    help="Overrides the config file.  [default: gittins]",
)
@policy_config_option(
    "The policy file: [policy]'s keys, a [tuning] table, Slurm's priority model "
    "(docs/simulator.md, 'Policy file')."
)
@click.option("--preemptive/--no-preemptive", default=True, show_default=True)
@click.option(
    "--scheduler",
    type=click.Choice(SCHEDULERS),
    default="slurm",
    show_default=True,
    help="slurm: Slurm's main scheduler + sched/backfill with reservations from time "
    "limits; greedy: lower-ranked jobs that fit start past a blocked one (no "
    "reservations); strict: stop at the first job that does not fit.",
)
@backfill_options
@click.option(
    "--pass-interval",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds between the policy's passes (the service's interval_s): re-ranking and "
    "preemption happen at its multiples; 0: at every event.",
)
@preemptible_fraction_option(
    None,
    "Share of jobs that may be preempted (seeded draw).  [default: the trace's "
    "checkpoint flags if it has any, else every job]",
)
@checkpoint_interval_option(
    0.0,
    "Seconds of work between a job's checkpoints: a preempted job loses the work "
    "since its last one (lost_work_gpu_s); 0: nothing lost.",
)
@seed_option("Seed of the time limits given to jobs without one and of --preemptible-fraction.")
@click.option(
    "--placement",
    type=click.Choice(("consolidate", "spread", "profile")),
    default="consolidate",
    show_default=True,
)
@click.option(
    "--restart-overhead",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds a preempted job loses on restart.",
)
@click.option(
    "--requeue-delay",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds a requeued job stays ineligible (Slurm: cred_expire + 1, 121 by default).",
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(exists=True),
    default=None,
    help="CSV of completed jobs' GPU-seconds to seed the Gittins distribution.",
)
@click.option(
    "--cpus-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="Count CPU cores too: cores per node (jobs take the trace's cpus_per_gpu column, "
    "else an even share).  [default: GPUs only]",
)
@click.option(
    "--cpu-knee",
    "cpu_knees",
    multiple=True,
    metavar="MODEL=CORES",
    help="Cores per GPU at which MODEL's GPU saturates (repeatable; adds to or overrides "
    "resnet50=7, vgg16=12, overfeat=40).",
)
@click.option(
    "--share",
    is_flag=True,
    help="Run GPU sharing (opportunistic jobs on shards, the node agent's decisions) with "
    "these options and Slurm alone (FIFO, --scheduler slurm, --no-preemptive, no sharing) "
    "on the same trace; print both and their ratios.",
)
@click.option(
    "--opportunistic-fraction",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Flag this seeded share of the jobs opportunistic (trace flags are kept).",
)
@click.option("--shards-per-gpu", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--share-seed", type=int, default=0, show_default=True, help="Seed of flags and job profiles."
)
@click.option(
    "--slow-fraction",
    type=click.FloatRange(0.0, 1.0),
    default=0.7,
    show_default=True,
    help="The agent's slow_fraction: a guaranteed job below it x its solo level is slowed.",
)
@click.option(
    "--eaco", is_flag=True, help="The agent's EaCO admission on, with inputs learnt from history."
)
@click.option(
    "--learnt-placement",
    is_flag=True,
    help="Place opportunistic jobs by their kinds' learnt utilisation (simulator only).",
)
@json_option
@click.option(
    "--compare",
    default=None,
    help="Comma-separated policies to compare; a Slurm-alone row (FIFO, --scheduler slurm, "
    "--no-preemptive) comes first for vs_slurm, FIFO is added for vs_fifo.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    callback=_needs_matplotlib,
    help="Write a JCT CDF PNG (needs matplotlib: the [plot] extra).",
)
def simulate(
    trace_path,
    fmt,
    skip_bad,
    nodes,
    gpus_per_node,
    policy,
    config_path,
    preemptive,
    scheduler,
    bf_window,
    bf_interval,
    bf_max_job_test,
    bf_resolution,
    bf_willrun_window,
    bf_willrun_start,
    bf_whole_nodes,
    sched_tick,
    pass_interval,
    preemptible_fraction,
    checkpoint_interval,
    seed,
    placement,
    restart_overhead,
    requeue_delay,
    history_path,
    cpus_per_node,
    cpu_knees,
    share,
    opportunistic_fraction,
    shards_per_gpu,
    share_seed,
    slow_fraction,
    eaco,
    learnt_placement,
    as_json,
    compare,
    plot,
):  # noqa: E501
    """Replay a trace through one policy (or several) on a simulated cluster."""
    cfg = load_policy(config_path)
    trace = load_trace(trace_path, fmt, skip_bad)
    if policy:
        cfg = replace(cfg, policy=policy)
    try:
        cluster = SimConfig(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            preemptive=preemptive,
            scheduler=scheduler,
            placement=placement,
            restart_overhead_s=restart_overhead,
            requeue_delay_s=requeue_delay,
            history=_read_history(history_path) if history_path else [],
            cpus_per_node=cpus_per_node,
            cpu_knees={**DEFAULT_KNEES, **_parse_knees(cpu_knees)},
            bf_window_s=bf_window,
            bf_interval_s=bf_interval,
            bf_max_job_test=bf_max_job_test,
            bf_resolution_s=bf_resolution,
            bf_willrun_window_s=bf_willrun_window,
            bf_willrun_start=bf_willrun_start,
            bf_whole_nodes=bf_whole_nodes,
            sched_tick_s=sched_tick,
            pass_interval_s=pass_interval,
            checkpoint_interval_s=checkpoint_interval,
            preemptible_fraction=preemptible_fraction,
            seed=seed,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    if share:
        _share(
            trace.jobs,
            cfg,
            cluster,
            ShareConfig(
                shards_per_gpu=shards_per_gpu,
                seed=share_seed,
                agent=co.Policy(slow_fraction=slow_fraction, eaco=co.EacoModel() if eaco else None),
                learnt_placement=learnt_placement,
            ),
            opportunistic_fraction,
            as_json,
        )
        return
    names = [p.strip() for p in compare.split(",") if p.strip()] if compare else [cfg.policy]
    bad = [p for p in names if p not in POLICIES]
    if bad:
        raise click.ClickException(
            f"unknown policies {', '.join(bad)} (choose from {', '.join(POLICIES)})"
        )
    if compare and "fifo" not in names:
        names.insert(0, "fifo")
    progress = _progress() if len(trace.jobs) >= 5000 else None
    try:
        if compare:
            rows, runs = run_compare(trace.jobs, names, cfg, cluster, progress)
        else:
            row, jobs = run_one(trace.jobs, cfg, cluster, progress)
            rows, runs = [row], {cfg.policy: jobs}
    except (ValueError, SimulationStuck) as exc:
        raise click.ClickException(str(exc)) from exc
    for r in rows:
        r["skipped_rows"] = trace.skipped
    if plot:
        plot_cdf(runs, plot)
    if as_json:
        echo_json(rows[0] if not compare else {"compare": rows})
    elif compare:
        click.echo(table(rows))
    else:
        echo_fields(rows[0])


def _share(jobs, cfg, cluster, share, fraction, as_json) -> None:
    """`simulate --share`: sharing against Slurm alone, as JSON or a table."""
    jobs = mark_opportunistic(jobs, fraction, share.seed)
    if not any(j.opportunistic for j in jobs):
        raise click.ClickException(
            "no opportunistic jobs: flag some in the trace or give --opportunistic-fraction"
        )
    try:
        out = run_pair(jobs, cfg, cluster, share)
    except (ValueError, SimulationStuck) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(out)
        return
    alone, shared, ratio = out["slurm_alone"], out["shared"], out["shared_vs_alone"]
    click.echo(f"{'metric':40} {'slurm alone':>14} {'shared':>14} {'ratio':>8}")
    for k in alone:
        if k in shared:
            r = f"{ratio[k]:8.3f}" if k in ratio else ""
            click.echo(f"{k:40} {alone[k]:14.4g} {shared[k]:14.4g} {r}")
    for k in shared:
        if k not in alone:
            click.echo(f"{k:40} {'':>14} {shared[k]:14.4g}")
