"""Simulator fidelity: each trace replayed live on Slurm (slurm-ext replay) and simulated.

    .venv/bin/python benchmarks/bench_fidelity.py          # quick (make bench): tiresias60 at 30x, ~6 min
    .venv/bin/python benchmarks/bench_fidelity.py --full   # synth1, synth2, tiresias60 at auto speedup, ~1 h
    .venv/bin/python benchmarks/bench_fidelity.py --traces synth1 --jobs 150 --modes slurm,service

Traces: seeded synthetic ones (`synthN`: slurm_ext.sim.synth.synth_jobs, N the seed,
--jobs jobs, offered load --load on the cluster's GPUs) and the Tiresias 60-job trace
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
speedups), and the replay's backfill and service cycles scaled back to trace seconds. Each live replay takes up to ~8-9 minutes at the default speedup; this is
a long benchmark, run it alone.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.modes import replay_mode
from slurm_ext.replay.plan import MODES, auto_speedup, plan
from slurm_ext.replay.run import Interrupted
from slurm_ext.replay.service import service_interval_s, with_checkpoints
from slurm_ext.replay.slurmconf import backfill_settings
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.run import simulate
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob, read_trace

ROOT = Path(__file__).resolve().parents[1]
TIRESIAS_60 = (
    ROOT / "tests" / "data" / "tiresias-60job.csv",
    ROOT.parent / "shared" / "traces" / "tiresias-60job.csv",
)
TIE = 0.02  # avg JCTs within 2 % count as a tie when comparing the modes' order
SIM_POLICY = {"slurm": "fifo", "service": "gittins", "service-requeue": "gittins"}


def load_trace(name: str, jobs: int, gpus: int, load: float) -> list[TraceJob] | None:
    if name == "tiresias60":
        for path in TIRESIAS_60:
            if path.exists():
                return read_trace(path).jobs
        print(f"skipping tiresias60: not found at {' or '.join(map(str, TIRESIAS_60))}")
        return None
    if name.startswith("synth") and name[5:].isdigit():
        return synth_jobs(jobs, gpus, load, int(name[5:]))
    raise SystemExit(f"unknown trace {name!r} (synthN or tiresias60)")


def _cmp(a: float, b: float) -> int:
    """-1, 0 or 1; values within TIE of each other compare equal."""
    if abs(a - b) <= TIE * max(abs(a), abs(b)):
        return 0
    return -1 if a < b else 1


def order(jct: dict[str, float]) -> str:
    """Modes best first, `=` between ties: 'service-requeue < service = slurm'."""
    ranked = sorted(jct, key=jct.__getitem__)
    out = ranked[:1]
    for prev, mode in zip(ranked, ranked[1:]):
        out += ["=" if _cmp(jct[prev], jct[mode]) == 0 else "<", mode]
    return " ".join(out)


def orders_agree(live: dict[str, float], sim: dict[str, float]) -> str:
    """'same' when every pair of modes is ordered alike (ties included); 'yes (up to
    ties)' when no pair is ordered oppositely; else 'NO'."""
    pairs = [(a, b) for a in live for b in live if a < b]
    signs = [(_cmp(live[a], live[b]), _cmp(sim[a], sim[b])) for a, b in pairs]
    if all(x == y for x, y in signs):
        return "same"
    return "NO" if any(x * y < 0 for x, y in signs) else "yes (up to ties)"


def sim_inputs(
    trace: list[TraceJob], args: argparse.Namespace, mode: str, speedup: float
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
            time_limit_s=p.limit_min * 60.0 * speedup,
            checkpoint=p.preemptible,
            user=user,
            job_name=p.name,
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
        pass_interval_s=service_interval_s(speedup) * speedup if mode != "slurm" else 0.0,
        checkpoint_interval_s=args.checkpoint_interval,
        seed=args.seed,
    )
    return jobs, cluster


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--full", action="store_true", help="synth1,synth2,tiresias60, auto speedup")
    ap.add_argument("--traces", default=None, help="default: tiresias60 (--full: all three)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=150, help="jobs per synthetic trace")
    ap.add_argument("--load", type=float, default=1.0, help="synthetic offered load")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--speedup", type=float, default=None, help="default: replay's auto speedup")
    ap.add_argument("--checkpoint-interval", type=float, default=1800.0)
    ap.add_argument("--preemptible-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scheduler", default="slurm", choices=("slurm", "greedy", "strict"))
    ap.add_argument("--workdir", default=None, help="keep the replays' logs here")
    args = ap.parse_args()
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
    print_table(rows, work)
    return 0


def run(args: argparse.Namespace, modes: list[str], gpus: int, work: Path) -> list[tuple]:
    rows: list[tuple] = []
    for name in args.traces.split(","):
        trace = load_trace(name, args.jobs, gpus, args.load)
        if trace is None:
            continue
        trace = fill_time_limits(trace, args.seed)
        speedup = args.speedup or auto_speedup(trace, gpus)
        live, sim = {}, {}
        for mode in modes:
            row = replay_mode(
                trace, mode, work / name / mode, speedup, args.checkpoint_interval,
                args.preemptible_fraction, args.seed, args.nodes, args.gpus_per_node,
            )  # fmt: skip
            live[mode] = row["avg_jct_s"]
            policy = with_checkpoints(
                replace(PolicyConfig(), policy=SIM_POLICY[mode]), args.checkpoint_interval
            )
            sim_trace, cluster = sim_inputs(trace, args, mode, speedup)
            out, _ = simulate(sim_trace, policy, cluster)
            sim[mode] = out["avg_jct_s"]
            rows.append((name, len(trace), speedup, mode, live[mode], sim[mode], row))
            print(
                f"{name} {mode}: live {live[mode]:.0f} s, sim {sim[mode]:.0f} s, "
                f"ratio {live[mode] / sim[mode]:.2f}",
                flush=True,
            )
        rows.append((name, "order", order(live), order(sim), orders_agree(live, sim)))
    return rows


def print_table(rows: list[tuple], work: Path) -> None:
    print()
    print(
        "| trace | jobs | speedup | mode | live avg JCT (s) | sim avg JCT (s) | live/sim | live p95 | live util | requeues | timeouts |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r[1] == "order":
            print(f"| {r[0]} | order of modes: live {r[2]}; simulated {r[3]}; agree: {r[4]} |")
            continue
        name, n, speedup, mode, lv, sv, row = r
        print(
            f"| {name} | {n} | {speedup:.0f} | {mode} | {lv:.0f} | {sv:.0f} | {lv / sv:.2f} | "
            f"{row['p95_jct_s']:.0f} | {row['gpu_utilization']:.2f} | {row['requeues']} | {row['timeouts']} |"
        )
    print(f"\nlogs: {work}")


if __name__ == "__main__":
    sys.exit(main())
