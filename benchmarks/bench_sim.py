"""Simulator benchmark: policy quality (avg JCT vs FIFO and the SRTF oracle) and speed.

    .venv/bin/python -m benchmarks.bench_sim                 # quick: 3,000-job traces
    .venv/bin/python -m benchmarks.bench_sim --full          # 10,000-job traces, speed to 100k jobs
    .venv/bin/python -m benchmarks.bench_sim --quality-only --full --markdown
    .venv/bin/python -m benchmarks.bench_sim --quality-only --full --markdown --gittins-classes gpus
    .venv/bin/python -m benchmarks.bench_sim --speed-only --full
    .venv/bin/python -m benchmarks.bench_sim --speed-only --sizes 100000 --loads 0.9,1.0,1.05

    .venv/bin/python -m benchmarks.bench_sim --speed-only --sizes 100000 --shapes philly,wide,bursty
    .venv/bin/python -m benchmarks.bench_sim --speed-only --sizes 100000 --shapes mixed
    .venv/bin/python -m benchmarks.bench_sim --speed-only --sizes 100000 --shapes philly --loads 1.2
    .venv/bin/python -m benchmarks.bench_sim --speed-only --sizes 100000 --shapes users --loads 1.0

Quality: the shipped Tiresias 60-job trace (8 GPUs) and seeded Philly-like synthetic
traces (64 GPUs, offered load 1.05; 10,000 and 2,000 jobs with --full, seeds 1-6),
preemptive, consolidated placement, Slurm's scheduler model (`--scheduler`), against
Slurm alone first (FIFO order, Slurm's scheduler with backfill, no preemption), then
strict FIFO (see FIFO_STRICT) and the SRTF oracle; a summary table per trace at the end.
Jobs get time limits from `sim.timelimits` (seed 0). Speed: preemptive 2D-Gittins with
placement on 1,000 GPUs (125 nodes x 8) from 10k to 100k jobs, on trace shapes (SHAPES,
and USERS: the other generator's trace).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.metrics import summarize
from slurm_ext.sim.report import COLUMNS, table
from slurm_ext.sim.run import slurm_alone
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob, read_trace
from slurm_ext.sim.users import synth_user_jobs

ROOT = Path(__file__).resolve().parents[1]
TRACE_60 = ROOT / "tests" / "data" / "tiresias-60job.csv"


# Baselines. `slurm-alone` is the yardstick: what Slurm does by itself on the same jobs
# (FIFO order, its main scheduler and sched/backfill with reservations from time limits,
# no requeues). `fifo-strict` is Tiresias' `fifo` (its public simulator stops at the first
# pending job that does not fit and never preempts; the paper's YARN-CS baseline).
FIFO_STRICT = {"scheduler": "strict", "preemptive": False}
BENCH_COLUMNS = (
    COLUMNS[:2]
    + (("vs Slurm", "vs_slurm", "{:.3f}"), ("vs FIFO strict", "vs_fifo_strict", "{:.3f}"))
    + COLUMNS[4:]
)
SLURM_ALONE = "slurm-alone"


def variants(base: PolicyConfig, cluster: SimConfig) -> list[tuple[str, PolicyConfig, dict]]:
    alone = slurm_alone(cluster)
    return [
        (
            SLURM_ALONE,
            replace(base, policy="fifo"),
            {"scheduler": alone.scheduler, "preemptive": False},
        ),
        ("fifo-strict", replace(base, policy="fifo"), FIFO_STRICT),
        ("multifactor", replace(base, policy="multifactor"), {}),
        (
            "las-2q",
            replace(
                base,
                policy="las",
                queue_thresholds_gpu_s=[3600.0],
                queue_gpu_exponent=0.0,
                starvation_factor=0,
            ),
            {},
        ),
        ("las", replace(base, policy="las"), {}),
        ("gittins", replace(base, policy="gittins"), {}),
        ("sjf*", replace(base, policy="sjf"), {}),
        ("srtf*", replace(base, policy="srtf"), {}),
    ]


# PolicyConfig knobs the command line can set (--queue-gpu-exponent 0 is Tiresias' GPU-second
# queue limits; the SRTF oracle takes its own best min_run_s, see below)
FLOAT_KNOBS = ("queue_gpu_exponent", "starvation_factor", "min_run_s")

# The SRTF oracle is the best of these protections (and the config's own) on each trace,
# so that the gittins / SRTF ratio does not move with the min_run_s chosen for gittins.
ORACLE_MIN_RUN_S = (0.0, 300.0, 600.0, 1200.0)


def run_one(trace, cfg: PolicyConfig, cluster: SimConfig) -> dict:
    t0 = time.perf_counter()
    sim = Simulator(trace, cfg, cluster)
    row = summarize(sim.run(), sim.total_gpus, sim.preemptions, sim.timeouts, sim.lost_work_gpu_s)
    row["runtime_s"] = time.perf_counter() - t0
    return row


def quality(trace, base: PolicyConfig, cluster: SimConfig) -> list[dict]:
    trace = fill_time_limits(trace, seed=0)
    rows = []
    for label, cfg, mech in variants(base, cluster):
        cl = replace(cluster, **mech)
        if label == "srtf*":
            protections = sorted({*ORACLE_MIN_RUN_S, cfg.min_run_s})
            tries = [run_one(trace, replace(cfg, min_run_s=m), cl) for m in protections]
            row = min(tries, key=lambda r: r["avg_jct_s"])
            row["runtime_s"] = sum(r["runtime_s"] for r in tries)
        else:
            row = run_one(trace, cfg, cl)
        row["policy"] = label
        rows.append(row)
    by = {r["policy"]: r["avg_jct_s"] for r in rows}
    for r in rows:
        r["vs_slurm"] = r["avg_jct_s"] / by[SLURM_ALONE]
        r["vs_fifo_strict"] = r["avg_jct_s"] / by["fifo-strict"]
        r["vs_srtf"] = r["avg_jct_s"] / by["srtf*"]
    return rows


def summary(traces: list[tuple[str, list[dict]]]) -> str:
    """One markdown row per trace: the baselines, then ratios of avg JCT (Slurm alone first)."""
    out = [
        "| trace | Slurm alone avg JCT s | FIFO strict avg JCT s "
        "| las-2q vs Slurm / strict / SRTF | gittins vs Slurm / strict / SRTF "
        "| srtf* vs Slurm / strict |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in traces:
        by = {r["policy"]: r for r in rows}
        ratios = lambda r, keys: " / ".join(f"{r[k]:.3f}" for k in keys)  # noqa: E731
        out.append(
            f"| {name} | {by[SLURM_ALONE]['avg_jct_s']:,.0f} "
            f"| {by['fifo-strict']['avg_jct_s']:,.0f} "
            f"| {ratios(by['las-2q'], ('vs_slurm', 'vs_fifo_strict', 'vs_srtf'))} "
            f"| {ratios(by['gittins'], ('vs_slurm', 'vs_fifo_strict', 'vs_srtf'))} "
            f"| {ratios(by['srtf*'], ('vs_slurm', 'vs_fifo_strict'))} |"
        )
    return "\n".join(out)


def wide(jobs: list[TraceJob]) -> list[TraceJob]:
    """Twice the GPUs for half the time (same load): 1-32 GPUs, a third multi-node."""
    return [replace(j, gpus=2 * j.gpus, duration_s=j.duration_s / 2) for j in jobs]


def bursty(jobs: list[TraceJob], period: float = 6 * 3600.0) -> list[TraceJob]:
    """The same jobs, every `period`'s arrivals squeezed into its first sixth."""
    return [
        replace(j, submit_time=(j.submit_time // period) * period + (j.submit_time % period) / 6)
        for j in jobs
    ]


def mixed(jobs: list[TraceJob]) -> list[TraceJob]:
    """Very wide jobs among the small ones (same load): 1-GPU jobs as they are, every
    multi-GPU job four times wider for a quarter of the time (8-64 GPUs, up to 8 whole
    nodes), so over half of the work is multi-node and the clearing and the backfill
    reservations span many nodes."""
    return [
        j if j.gpus == 1 else replace(j, gpus=4 * j.gpus, duration_s=j.duration_s / 4) for j in jobs
    ]


SHAPES = {"philly": lambda jobs: jobs, "wide": wide, "bursty": bursty, "mixed": mixed}
# `users`: not a reshaping of the flat trace but the other generator, `trace synth`'s
# default (sim/users.py: recurring users' kinds, their own time limits, half the kinds
# checkpointing, so only those may be preempted), at load 1.0 in the speed table
USERS = "users"


def speed_trace(n: int, load: float, shape: str) -> list[TraceJob]:
    """The speed runs' trace: seed 1, 1,000 GPUs, time limits from seed 0 where missing."""
    if shape == USERS:
        jobs = synth_user_jobs(n, 1000, load=load, seed=1)
    else:
        jobs = SHAPES[shape](synth_jobs(n, 1000, load=load, seed=1))
    return fill_time_limits(jobs, seed=0)


def speed(
    sizes: list[int],
    base: PolicyConfig,
    load: float = 1.05,
    scheduler: str = "slurm",
    shape: str = "philly",
) -> list[tuple[int, float, float, int, int]]:
    """(jobs, wall s, CPU s, preemptions, events) per size."""
    out = []
    for n in sizes:
        trace = speed_trace(n, load, shape)
        cluster = SimConfig(
            nodes=125, gpus_per_node=8, placement="consolidate", scheduler=scheduler
        )
        t0, c0 = time.perf_counter(), time.process_time()
        sim = Simulator(trace, replace(base, policy="gittins"), cluster)
        sim.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.append((n, wall, cpu, sim.preemptions, sim.seq))
        print(f"  {n} jobs, load {load}, {shape}: {out[-1][1]:.1f} s", file=sys.stderr)
    return out


def main() -> None:
    defaults = PolicyConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="10k-job synthetic traces, speed to 100k")
    ap.add_argument("--seeds", default="1,2,3,4,5,6", help="synthetic trace seeds")
    ap.add_argument(
        "--jobs", default=None, help="jobs per synthetic trace, comma-separated (10000,2000)"
    )
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--quality-only", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--loads", default="1.05", help="offered loads for the speed runs")
    ap.add_argument(
        "--quality-load", type=float, default=1.05, help="offered load of the synthetic traces"
    )
    ap.add_argument("--sizes", default=None, help="job counts for the speed runs")
    ap.add_argument(
        "--shapes",
        default="philly",
        help=f"speed-run trace shapes ({', '.join([*SHAPES, USERS])})",
    )
    ap.add_argument(
        "--scheduler",
        choices=("slurm", "greedy", "strict"),
        default="slurm",
        help="SimConfig.scheduler of the policy rows and speed runs",
    )
    ap.add_argument(
        "--gittins-classes",
        choices=("pooled", "gpus"),
        default=defaults.gittins_classes,
        help="PolicyConfig.gittins_classes (default: the default config's)",
    )
    for name in FLOAT_KNOBS:
        ap.add_argument(
            "--" + name.replace("_", "-"),
            type=float,
            default=getattr(defaults, name),
            help=f"PolicyConfig.{name} (default: the default config's)",
        )
    args = ap.parse_args()
    base = PolicyConfig(
        gittins_classes=args.gittins_classes,
        **{name: getattr(args, name) for name in FLOAT_KNOBS},
    )
    show = lambda rows: print(table(rows, markdown=args.markdown, columns=BENCH_COLUMNS) + "\n")  # noqa: E731
    if not args.speed_only:
        traces: list[tuple[str, list[dict]]] = []
        small = replace(base, queue_thresholds_gpu_s=[500.0], min_run_s=30.0)
        print(
            "Tiresias 60-job trace, 1 node x 8 GPUs, thresholds [500], min_run 30 s, restart 10 s"
        )
        rows = quality(
            read_trace(TRACE_60).jobs,
            small,
            SimConfig(nodes=1, gpus_per_node=8, restart_overhead_s=10, scheduler=args.scheduler),
        )
        show(rows)
        traces.append(("Tiresias 60-job, 1 x 8 GPUs", rows))
        counts = args.jobs or ("10000,2000" if args.full else "3000")
        for n in (int(x) for x in counts.split(",")):
            for seed in (int(s) for s in args.seeds.split(",")):
                load = args.quality_load
                print(
                    f"synthetic Philly-like, {n} jobs, seed {seed}, 8 nodes x 8 GPUs, load {load}"
                )
                rows = quality(
                    synth_jobs(n, 64, load=load, seed=seed),
                    base,
                    SimConfig(nodes=8, gpus_per_node=8, scheduler=args.scheduler),
                )
                show(rows)
                name = f"{n:,} jobs, seed {seed}"
                traces.append((name if load == 1.05 else f"{name}, load {load}", rows))
        print(summary(traces))
    if not args.quality_only:
        sizes = [10000, 20000, 50000, 100000] if args.full else [10000, 20000]
        if args.sizes:
            sizes = [int(x) for x in args.sizes.split(",")]
        print(
            f"speed: preemptive 2D-Gittins, consolidated placement, 125 nodes x 8 GPUs, "
            f"--scheduler {args.scheduler}"
        )
        print("| shape | load | jobs | wall s | CPU s | CPU s per 1k jobs | preemptions | events |")
        print("|---|---|---|---|---|---|---|---|")
        for shape in args.shapes.split(","):
            for load in (float(x) for x in args.loads.split(",")):
                for n, t, cpu, p, ev in speed(sizes, base, load, args.scheduler, shape):
                    print(
                        f"| {shape} | {load} | {n} | {t:.1f} | {cpu:.1f} | {cpu / n * 1000:.2f} "
                        f"| {p} | {ev} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
