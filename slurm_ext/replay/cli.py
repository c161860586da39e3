"""`slurm-ext replay`: a trace replayed live on Slurm, per mode, against Slurm alone."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click

from slurm_ext.config import ConfigError, load_config
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay import service, target
from slurm_ext.replay.metrics import KEYS, add_ratios, summarize
from slurm_ext.replay.plan import MODES, PlanError, auto_speedup, limit_fidelity, plan
from slurm_ext.replay.run import Interrupted, Replay, ReplayError
from slurm_ext.replay.slurmconf import replay_conf
from slurm_ext.sim.traces import FORMATS, TraceError, read_trace


def save_records(path: Path, records: dict, submitted: dict) -> None:
    """Per trace job: Slurm's id, final state, submit and runs (epoch start, end),
    requeues."""
    out = {
        str(job.trace.job_id): {
            "slurm_id": sid,
            "submit": records[sid].submit if sid in records else None,
            "state": records[sid].state if sid in records else "UNKNOWN",
            "runs": records[sid].runs if sid in records else [],
            "requeues": records[sid].requeues if sid in records else 0,
            "limit_min": job.limit_min,
            "work_wall_s": job.work_wall_s,
        }
        for sid, job in submitted.items()
    }
    path.write_text(json.dumps(out, indent=1))


def _say(msg: str) -> None:
    click.echo(msg, err=True)


def replay_mode(
    jobs,
    mode: str,
    workdir: Path,
    speedup: float,
    checkpoint_interval: float,
    preemptible_fraction: float,
    seed: int,
    nodes: int,
    gpus_per_node: int,
    slurm_conf: str | None = None,
    partition: str | None = None,
    accounting: bool = True,
    stop_event=None,
    policy: PolicyConfig | None = None,
) -> dict[str, float]:
    """One mode on a fresh local cluster (or the given partition); its summary row."""
    label = f"[{mode}] "
    tgt = target.existing(slurm_conf, partition or "") if slurm_conf else None
    if tgt is not None and mode != "slurm":
        others = target.foreign_jobs(tgt)
        if others:  # the service writes the priority of every job in its partition
            raise target.TargetError(
                f"mode {mode} needs partition {tgt.partition!r} to itself: it holds "
                f"{len(others)} other job(s) (e.g. {others[0]}) whose priority the service "
                "would change"
            )
    shape = (tgt.nodes, tgt.gpus_per_node) if tgt else (nodes, gpus_per_node)
    planned = plan(jobs, speedup, *shape, mode, preemptible_fraction, seed)
    if (workdir / "jobs").exists():  # old checkpoints, state and records would mix in
        raise target.TargetError(f"{workdir} already holds a replay; give a fresh --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = None
    replay = None
    try:
        if tgt is None:
            conf = replay_conf(speedup, max(j.limit_min for j in planned))
            _say(
                f"{label}starting a local cluster ({nodes} x {gpus_per_node} GPUs) in {workdir}/cluster"
            )
            tgt = target.local(workdir / "cluster", nodes, gpus_per_node, conf, accounting)
        if mode != "slurm":
            cfg = service.write_config(
                workdir / "service.toml",
                tgt.env["SLURM_CONF"],
                tgt.partition,
                speedup,
                preemption=mode == "service-requeue",
                policy=policy,
                checkpoint_interval_s=checkpoint_interval,
            )
            proc = service.start(cfg, workdir / "service.log")
            _say(f"{label}service started (pid {proc.pid}, log {workdir}/service.log)")
        replay = Replay(tgt, planned, workdir / "jobs", checkpoint_interval / speedup, label, _say)
        if stop_event is not None:
            replay.stop_event = stop_event
        records, _ = replay.run()
        save_records(workdir / "records.json", records, replay.submitted)
        row = summarize(records.values(), tgt.total_gpus, speedup)
        row["mode"] = mode  # type: ignore[assignment]
        row["speedup"] = speedup
        row["limit_stretch"] = limit_fidelity(planned, speedup)
        row["accounting"] = tgt.accounting  # type: ignore[assignment]
        return row
    finally:
        if replay is not None and replay.submitted and tgt is not None and tgt.cluster is None:
            _say(f"{label}cancelled the {len(replay.submitted)} jobs this replay submitted")
        service.stop(proc)
        if tgt is not None and tgt.cluster is not None:
            tgt.stop()
            _say(f"{label}stopped the local cluster's daemons")


@click.command()
@click.option(
    "--trace", "trace_path", required=True, type=click.Path(exists=True), help="Trace file."
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="tiresias", show_default=True)
@click.option("--skip-bad", is_flag=True, help="Skip and count bad rows instead of stopping.")
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
@click.option(
    "--checkpoint-interval",
    type=click.FloatRange(min=0),
    default=1800.0,
    show_default=True,
    help="Trace seconds between a job's checkpoints (0: never; a requeue loses it all).",
)
@click.option(
    "--preemptible-fraction",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Share of jobs opted in to requeue besides the trace's checkpoint flag (service-requeue).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Time limits and opt-ins.")
@click.option("--nodes", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=4, show_default=True)
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
@click.option(
    "--config",
    "config_path",
    type=click.Path(),
    default=None,
    help="TOML with PolicyConfig keys for the service (trace seconds; scaled for you).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
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
    try:
        policy = load_config(PolicyConfig, config_path)
        trace = read_trace(trace_path, fmt, skip_bad=skip_bad)
    except (ConfigError, TraceError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not trace.jobs:
        raise click.ClickException(f"{trace_path}: no usable jobs")
    if trace.skipped:
        _say(f"skipped {trace.skipped} bad rows, e.g. {trace.problems[0]}")
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
    # SIGTERM outside the submit loop (cluster start-up, service start) unwinds like
    # Ctrl-C, through every `finally` that stops what was started
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for mode in names:
            rows[mode] = replay_mode(
                trace.jobs, mode, root / mode, speedup, checkpoint_interval,
                preemptible_fraction, seed, nodes, gpus_per_node, slurm_conf, partition,
                policy=policy,
            )  # fmt: skip
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
        click.echo(json.dumps(rows[names[0]] if len(names) == 1 else {"modes": rows}, indent=2))
        return
    for mode, row in rows.items():
        click.echo(f"== {mode}")
        for k in (*KEYS, "vs_slurm", "speedup", "limit_stretch"):
            if k in row:
                v = row[k]
                click.echo(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
