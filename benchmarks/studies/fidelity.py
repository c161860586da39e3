"""Simulator fidelity: each trace replayed live on Slurm (slurm-ext replay) and simulated.

    .venv/bin/python -m benchmarks.studies.fidelity          # quick: tiresias60 at 30x, ~6 min
    .venv/bin/python -m benchmarks.studies.fidelity --full   # synth1, synth2, tiresias60, ~1 h
    .venv/bin/python -m benchmarks.studies.fidelity --traces synth1 --jobs 150 --modes slurm,service

    .venv/bin/python -m benchmarks.studies.fidelity --traces synth1 --jobs 100 --speedup 1500 \
        --live-from DIR   # simulate again against the live rows an earlier --workdir DIR kept

    # the 10 % target read on means: 3 live runs per cell, each simulated 50 times perturbed
    .venv/bin/python -m benchmarks.studies.fidelity --traces synth2 --jobs 100 --speedup 1500 \
        --modes slurm,service --repeats 3 --sim-ensemble 50 --workdir DIR
    .venv/bin/python -m benchmarks.studies.fidelity ... --live-from D1,D2,D3 --sim-ensemble 50

Traces: seeded synthetic ones (`synthN`: slurm_ext.sim.synth.synth_jobs, N the seed,
--jobs jobs, offered load --load on the cluster's GPUs), recurring users' ones
(`usersN`: slurm_ext.sim.users.synth_user_jobs, --users users) and the Tiresias 60-job trace
(`tiresias60`, from tests/data or <repo>/../shared/traces; skipped, saying so, when
absent). Per trace and mode: the live replay's avg JCT (trace seconds, read from
sacct), the simulator's with matching settings, their ratio, and whether the modes
rank the same way live and simulated.

Mode -> simulator settings (same time limits, `fill_time_limits(jobs, seed)`):
  slurm            policy fifo (Slurm's multifactor here is age + one user's fair-share),
                   no preemption
  service          policy gittins (the service's default PolicyConfig), no preemption
  service-requeue  policy gittins, preemption of opted-in jobs
with `--scheduler` (default "slurm": the simulator's model of sched/backfill), the time
limits Slurm really enforced (whole wall minutes, so longer than the trace's at high
speedups), and the replay's backfill and service cycles scaled back to trace seconds:
the service's pass period as measured in its log, Slurm's hold of a requeued job
(`requeue_delay_s` = 6 wall s x speedup; the jobs' launch overhead, held minus work,
measured to the millisecond in the replay's slurmctld log, `fidelity_ctld.py`, else
from sacct's whole seconds; --no-requeue-hold leaves it out), the service's
one waiting job per pass and its cap of requeues per pass, the Gittins table rebuilt at
every completion as the service rebuilds it each pass (`history_refresh` = 1), and
Slurm's whole-second clock in the run lengths that history learns (`clock_s` = 1 wall s
x speedup; --exact-clock leaves it out), and cons_tres's will-run window in backfill's
reservations (`bf_willrun_window_s` = 30 wall s x speedup, `sim.willrun`;
--exact-willrun leaves it out), and the main scheduler's wait for slurmctld's next
whole wall second after a submit (`sched_tick_s` = 1 wall s x speedup; a job end runs it
at once; --no-sched-tick leaves it out), and cons_tres's node choice by free cores, a
core per job on the replay's 16-core nodes (`fit_cores`, sim.corefit; --gpu-fit leaves
it out), and backfill's reservations of whole nodes (`bf_whole_nodes`; --gpu-resv
leaves it out). The service modes rank with the policy the run's service ran, read from its service.toml (settings
added since it ran take their earlier behaviour: fidelity_policy.py; --default-policy
takes today's defaults). The simulated spread over
the pass period x0.9-1.1 shows how much one run's timing can move a cell. Per mode,
<workdir>/<trace>/<mode>/per_job.txt says where the live and simulated runs part, job
by job (`fidelity_jobs.py`). Each live replay takes up to ~8-9 minutes at the default
speedup; this is a long benchmark, run it alone.

Distributions (both sides are chaotic: one live run against one simulated run cannot
check 10 %): `--repeats R` replays each cell R times, one at a time (<workdir>/r1...);
`--live-from D1,D2` reads several kept runs as repeats; `--sim-ensemble N` simulates
each live run N more times under seeded perturbations of what the replay cannot control
and the simulator takes as fixed (`--perturb`: timer phase, submit lag, launch overhead
by default; `rank`, the wait for the service's first pass, opt-in; fidelity_ensemble.py),
and prints each run's ensemble mean, range and the live value's percentile in it. A
last table (fidelity_tables.py) compares per trace and mode the live runs' mean with
the simulated mean (every run's ensemble pooled): the 10 % target reads on the means.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from benchmarks.studies import fidelity_args, fidelity_ctld, fidelity_jobs, fidelity_policy
from benchmarks.studies.fidelity_ensemble import PERTURBATIONS, Draws, Spread, perturb
from benchmarks.studies.fidelity_tables import Cell, print_runs, print_summary
from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.modes import ClusterSpec, ReplayOptions, replay_mode
from slurm_ext.replay.plan import auto_speedup, plan
from slurm_ext.replay.run import Interrupted
from slurm_ext.replay.service import service_interval_s, with_checkpoints, with_requeue_hold
from slurm_ext.replay.slurmconf import REQUEUE_HOLD_S, WILLRUN_WINDOW_S, backfill_settings
from slurm_ext.replay.target import cpus_per_node
from slurm_ext.service.loop import ServiceConfig
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.run import simulate
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob, read_trace
from slurm_ext.sim.users import UserModel, synth_user_jobs

ROOT = Path(__file__).resolve().parents[2]
TIRESIAS_60 = (
    ROOT / "tests" / "data" / "tiresias-60job.csv",
    ROOT.parent / "shared" / "traces" / "tiresias-60job.csv",
)
# the simulator is re-run with the service's pass period x these: the spread shows how
# much one run's timing (Slurm's and the service's latency) can move the result
PERIOD_JITTER = (0.9, 0.95, 1.05, 1.1)
SLURM_CLOCK_S = 1.0  # Slurm's StartTime/EndTime resolution (wall s)
# slurmctld's background loop wakes at each whole wall second and runs the main scheduler
# that a submit asked for (the replay's sched_interval=1, batch_sched_delay=0)
SCHED_TICK_S = 1.0
SIM_POLICY = {"slurm": "fifo", "service": "gittins", "service-requeue": "gittins"}


def load_trace(
    name: str, jobs: int, gpus: int, load: float, users: int = 8
) -> list[TraceJob] | None:
    if name == "tiresias60":
        for path in TIRESIAS_60:
            if path.exists():
                return read_trace(path).jobs
        print(f"skipping tiresias60: not found at {' or '.join(map(str, TIRESIAS_60))}")
        return None
    if name.startswith("synth") and name[5:].isdigit():
        return synth_jobs(jobs, gpus, load, int(name[5:]))
    if name.startswith("users") and name[5:].isdigit():  # recurring users' kinds of jobs
        return synth_user_jobs(jobs, gpus, load, int(name[5:]), UserModel(users=users))
    raise SystemExit(f"unknown trace {name!r} (synthN, usersN or tiresias60)")


def sim_policy(args: argparse.Namespace, mode: str, speedup: float) -> PolicyConfig:
    """The policy a mode's simulation ranks with: today's defaults for the mode, the
    checkpoint interval and requeue hold the replay tells its service (replay.service)."""
    policy = with_checkpoints(
        replace(PolicyConfig(), policy=SIM_POLICY[mode]), args.checkpoint_interval
    )
    return with_requeue_hold(policy, speedup) if args.requeue_hold else policy


def sim_inputs(
    trace: list[TraceJob],
    args: argparse.Namespace,
    mode: str,
    speedup: float,
    pass_wall_s: float | None = None,
    launch_wall_s: float = 0.0,
) -> tuple[list[TraceJob], SimConfig]:
    """The trace and cluster the simulator must use to match the live replay: the time
    limits Slurm really enforced (rounded up to whole wall minutes by `replay.plan`), the
    jobs that opted in to requeue, and the replay's backfill and service cycles, all in
    trace seconds."""
    planned = plan(
        trace, speedup, args.nodes, args.gpus_per_node, mode, args.preemptible_fraction, args.seed
    )
    # live, every job runs as this user under its replay name: the conditioned Gittins
    # index groups them so, and the simulator must see the same kinds
    user = getpass.getuser()
    jobs = [
        replace(
            p.trace,
            # live a job holds its GPUs for its work plus its launch (measured)
            duration_s=p.trace.duration_s + launch_wall_s * speedup,
            time_limit_s=p.limit_min * 60.0 * speedup,
            checkpoint=p.preemptible,
            user=user,
            job_name=p.kind_name,
        )
        for p in planned
    ]
    bf = backfill_settings(speedup, max(p.limit_min for p in planned))
    cluster = SimConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        preemptive=mode == "service-requeue",
        scheduler=args.scheduler,
        bf_interval_s=bf.interval_s * speedup,
        bf_resolution_s=bf.resolution_s * speedup,
        bf_window_s=bf.window_min * 60.0 * speedup,
        # cons_tres's will-run batches: 30 wall s, doubling (sim.willrun)
        bf_willrun_window_s=WILLRUN_WINDOW_S * speedup if args.willrun else 0.0,
        bf_willrun_start="batch",  # the replay's Debian 22.05 reports the batch's last end
        # a submit waits for the main scheduler's next whole-second tick; a job end does not
        sched_tick_s=SCHED_TICK_S * speedup
        if args.sched_tick and args.scheduler == "slurm"
        else 0.0,
        # cons_tres places jobs by free cores, one per job on the replay's nodes (sim.corefit)
        fit_cores=cpus_per_node(args.gpus_per_node)
        if args.core_fit and args.scheduler == "slurm"
        else 0,
        # a blocked job's reservation takes its nodes whole (backfill's node bitmap)
        bf_whole_nodes=args.whole_nodes and args.scheduler == "slurm",
        pass_interval_s=(pass_wall_s or service_interval_s(speedup)) * speedup
        if mode != "slurm"
        else 0.0,
        # the service requeues for its best waiting job once a pass, at most its cap
        one_preemption_per_pass=True,
        max_requeues_per_pass=ServiceConfig().max_requeues_per_pass,
        checkpoint_interval_s=args.checkpoint_interval,
        restart_overhead_s=max(launch_wall_s, 0.0) * speedup,  # a restart is a launch
        requeue_delay_s=REQUEUE_HOLD_S * speedup if args.requeue_hold else 0.0,
        seed=args.seed,
        # the live service learns run lengths from Slurm's whole-second times: 1 wall s
        clock_s=SLURM_CLOCK_S * speedup if args.slurm_clock else 0.0,
        # and rebuilds its Gittins table from every completion by its next pass (the
        # simulator's default waits for the history to grow by a quarter)
        history_refresh=1,
    )
    return jobs, cluster


def parser() -> argparse.ArgumentParser:
    """The options (fidelity_args.py), described by this module's doc."""
    return fidelity_args.parser(__doc__)


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if args.repeats < 1 or args.sim_ensemble < 0:
        ap.error(
            f"--repeats must be >= 1 and --sim-ensemble >= 0 (got {args.repeats}, {args.sim_ensemble})"
        )
    bad = [w for w in args.perturb.split(",") if w and w not in PERTURBATIONS]
    if bad:
        ap.error(f"--perturb: unknown {', '.join(bad)} (choose from {', '.join(PERTURBATIONS)})")
    if args.live_from and args.repeats != 1:
        ap.error("--repeats replays; with --live-from give the runs' directories comma-separated")
    if args.traces is None:
        args.traces = "synth1,synth2,tiresias60" if args.full else "tiresias60"
        if not args.full and args.speedup is None:
            args.speedup = 30.0
    modes = [m for m in args.modes.split(",") if m]
    gpus = args.nodes * args.gpus_per_node
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-fidelity-"))
    try:
        rows = run(args, modes, gpus, work)
    except Interrupted:
        print("interrupted: the replay cancelled its jobs and stopped its daemons", file=sys.stderr)
        return 130
    print_runs(rows, work)
    print_summary(rows)
    return 0


def live_dirs(args: argparse.Namespace, work: Path) -> list[tuple[Path, Path]]:
    """(where each live run's records are, where its outputs go): `--live-from`'s
    directories (comma-separated: several runs of the same cells), else `--repeats`
    replays, one at a time, in <workdir> itself (one) or <workdir>/r1, r2, ..."""
    if args.live_from:
        dirs = [Path(d) for d in args.live_from.split(",") if d]
    else:
        dirs = [work] if args.repeats == 1 else [work / f"r{i + 1}" for i in range(args.repeats)]
    if len(dirs) == 1:
        return [(dirs[0], work)]
    return [(d, work / f"r{i + 1}") for i, d in enumerate(dirs)]


def live_row(
    args: argparse.Namespace,
    trace: list[TraceJob],
    name: str,
    mode: str,
    speedup: float,
    live: Path,
) -> dict:
    """The live replay's summary row: replayed now into `live` (and saved as row.json
    beside its records), or read back from a `--live-from` directory."""
    if args.live_from:
        saved = live / name / mode / "row.json"
        if not saved.exists():
            raise SystemExit(f"--live-from: no {saved}")
        return json.loads(saved.read_text())
    options = ReplayOptions(speedup, args.checkpoint_interval, args.preemptible_fraction, args.seed)
    row = replay_mode(
        trace, mode, live / name / mode, options, ClusterSpec(args.nodes, args.gpus_per_node)
    )
    (live / name / mode / "row.json").write_text(json.dumps(row, indent=1))
    return row


def run(args: argparse.Namespace, modes: list[str], gpus: int, work: Path) -> list[Cell]:
    cells: list[Cell] = []
    runs = live_dirs(args, work)
    for name in args.traces.split(","):
        trace = load_trace(name, args.jobs, gpus, args.load, args.users)
        if trace is None:
            continue
        trace = fill_time_limits(trace, args.seed)
        speedup = args.speedup or auto_speedup(trace, gpus)
        rows = [
            {mode: live_row(args, trace, name, mode, speedup, live) for mode in modes}
            for live, _ in runs
        ]  # every replay first, one at a time; then the simulations
        for (live, out), rows_live in zip(runs, rows):
            cells += simulate_run(args, trace, name, modes, speedup, live, out, rows_live)
    return cells


def simulate_run(
    args: argparse.Namespace,
    trace: list[TraceJob],
    name: str,
    modes: list[str],
    speedup: float,
    live: Path,
    out: Path,
    rows_live: dict[str, dict],
) -> list[Cell]:
    """Simulate one live run's modes with its inputs: once as measured, over the pass
    period's range, and `--sim-ensemble` times perturbed (fidelity_ensemble)."""
    dirs = {mode: live / name / mode for mode in modes}
    # live a job holds its GPUs a little longer than its work (launch, interpreter):
    # measured on every mode's jobs that ran once, pooled, from slurmctld's log (ms),
    # else from sacct's whole seconds (runs kept without the log)
    ctld = fidelity_ctld.launch_extras(list(dirs.values()), trace, speedup)
    extras = (
        ctld
        if ctld is not None
        else fidelity_jobs.launch_extras(
            [d / "records.json" for d in dirs.values()], trace, speedup
        )
    )
    launch = sum(extras) / len(extras) if extras else 0.0
    cells = []
    for mode in modes:
        row = rows_live[mode]
        policy = sim_policy(args, mode, speedup)
        # the policy the live service ran (its service.toml): settings added since are
        # absent there, and it ranked as before they existed (fidelity_policy)
        ran = fidelity_policy.live_policy(dirs[mode], speedup) if args.live_policy else None
        if ran is not None:
            policy = ran
        period = fidelity_ctld.pass_period_s(dirs[mode] / "service.log")
        row["launch_wall_s"] = launch
        row["launch_from"] = "slurmctld log" if ctld is not None else "sacct"
        sim_trace, cluster = sim_inputs(trace, args, mode, speedup, period, launch)
        res, sim_run = simulate(sim_trace, policy, cluster)
        sim = res["avg_jct_s"]
        fidelity_jobs.per_job(dirs[mode], out / name / mode, trace, speedup, sim_run)
        spread = (sim, sim)
        if mode != "slurm":  # how much the service's pass timing alone moves it
            base = period or service_interval_s(speedup)
            jct = [
                simulate(t, policy, c)[0]["avg_jct_s"]
                for t, c in (
                    sim_inputs(trace, args, mode, speedup, base * f, launch) for f in PERIOD_JITTER
                )
            ]
            spread = (min(jct + [sim]), max(jct + [sim]))
        row["sim_min_s"], row["sim_max_s"] = spread
        ensemble = None
        if args.sim_ensemble:
            draws = Draws(
                speedup,
                tuple(w for w in args.perturb.split(",") if w),
                launch,
                tuple(ctld or ()),  # sacct's spread is its clock's: no draw from it
                tuple(fidelity_ctld.submit_lags(dirs[mode], trace, speedup)),
            )
            members = [
                perturb(sim_trace, cluster, draws, args.seed, k) for k in range(args.sim_ensemble)
            ]
            ensemble = Spread(
                tuple(m.avg_jct_s(simulate(m.jobs, policy, cluster)[1]) for m in members)
            )
        live_jct = row["avg_jct_s"]
        cells.append(Cell(name, len(trace), speedup, mode, str(live), live_jct, sim, row, ensemble))
        extra = (
            f"; ensemble of {args.sim_ensemble}: mean {ensemble.mean:.0f} s,"
            f" {ensemble.low:.0f}-{ensemble.high:.0f}, live at percentile"
            f" {ensemble.percentile(live_jct):.0f}"
            if ensemble
            else ""
        )
        print(
            f"{name} {mode} ({live}): live {live_jct:.0f} s, sim {sim:.0f} s,"
            f" ratio {live_jct / sim:.2f}{extra}",
            flush=True,
        )
    return cells


if __name__ == "__main__":
    sys.exit(main())
