"""Conditioned Gittins on recurring-user traces: avg JCT against FIFO (interim figures).

Traces: `sim.users.synth_user_jobs` (users resubmitting kinds of jobs, time limits,
checkpoint flags), 64 GPUs (8 x 8), offered load --load. Per seed it runs, on today's
greedy-backfill simulator, with and without preemption:
  fifo                    FIFO with backfill (the baseline, ratio 1)
  gittins-today           gittins_kinds = [], gittins_time_limit = false (before issue 16)
  gittins-conditioned     the shipped defaults (per-kind tables, time-limit truncation)
  sjf-oracle              non-preemptive only: true sizes (a bound, not a policy)
and prints each one's avg JCT / non-preemptive FIFO's (Slurm-like), per seed and the mean / worst over seeds, plus
p99 JCT of the widest 5% of jobs relative to that FIFO's. `--set` overrides PolicyConfig
fields of the conditioned variant as JSON (for tuning on some seeds, checking on others).

    .venv/bin/python benchmarks/bench_kinds.py --seeds 1-4 --jobs 2000
    .venv/bin/python benchmarks/bench_kinds.py --seeds 5-8 --set '{"gittins_kind_min_samples": 3}'
    .venv/bin/python benchmarks/bench_kinds.py --speed 100000   # wall time of one long run
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from multiprocessing import Pool

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.metrics import percentile, summarize
from slurm_ext.sim.users import synth_user_jobs

TODAY = {"gittins_kinds": [], "gittins_time_limit": False, "gittins_index": "quantum"}


def variants(overrides: dict, preemptive: bool) -> list[tuple[str, PolicyConfig]]:
    out = [
        ("fifo", PolicyConfig(policy="fifo")),
        ("gittins-today", replace(PolicyConfig(), **TODAY)),
        ("gittins-conditioned", replace(PolicyConfig(), **overrides)),
    ]
    if not preemptive:
        out.append(("sjf-oracle", PolicyConfig(policy="sjf")))
    return out


def wide_p99(jobs) -> float:
    """p99 JCT of the widest 5% of jobs (by GPUs, ties by submit order)."""
    wide = sorted(jobs, key=lambda j: (-j.gpus, j.submit))[: max(1, len(jobs) // 20)]
    return percentile(sorted(j.finish - j.submit for j in wide), 99)


def one(args: tuple) -> tuple[tuple, dict]:
    seed, n, load, preemptive, overrides = args
    trace = synth_user_jobs(n, 64, load=load, seed=seed)
    cluster = SimConfig(nodes=8, gpus_per_node=8, preemptive=preemptive)
    rows = {}
    for label, cfg in variants(json.loads(overrides), preemptive):
        t0 = time.perf_counter()
        sim = Simulator(trace, cfg, cluster)
        jobs = sim.run()
        row = summarize(jobs, sim.total_gpus, sim.preemptions)
        row["wide_p99_s"] = wide_p99(jobs)
        row["runtime_s"] = time.perf_counter() - t0
        rows[label] = row
    return args, rows


def speed(n: int) -> None:
    """Wall seconds of one n-job simulation (seed 1, load 1.0), today's index vs the
    conditioned one, with and without preemption."""
    trace = synth_user_jobs(n, 64, load=1.0, seed=1)
    for preemptive in (True, False):
        cluster = SimConfig(nodes=8, gpus_per_node=8, preemptive=preemptive)
        times = {}
        for label, cfg in variants({}, True)[1:3]:
            t0 = time.perf_counter()
            sim = Simulator(trace, cfg, cluster)
            sim.run()
            times[label] = time.perf_counter() - t0
        a, b = times["gittins-today"], times["gittins-conditioned"]
        mode = "preemptive" if preemptive else "no preemption"
        print(f"{n} jobs, {mode}: today {a:.1f} s, conditioned {b:.1f} s ({b / a:.2f}x)")


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-4", help="seed range, e.g. 1-4")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for conditioned")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--speed", type=int, default=0, help="time one run of this many jobs")
    args = ap.parse_args()
    if args.speed:
        speed(args.speed)
        return
    tasks = [
        (s, args.jobs, args.load, p, args.set) for p in (False, True) for s in seeds(args.seeds)
    ]
    with Pool(args.workers) as pool:
        results = dict(pool.map(one, tasks))
    print(f"# {args.jobs} jobs, 64 GPUs, load {args.load}, overrides {args.set}")
    for preemptive in (False, True):
        mode = "preemptive" if preemptive else "no preemption"
        print(f"\n## {mode} (avg JCT / non-preemptive fifo's)")
        by: dict[str, list[float]] = {}
        wide: dict[str, list[float]] = {}
        for s in seeds(args.seeds):
            rows = results[(s, args.jobs, args.load, preemptive, args.set)]
            fifo = results[(s, args.jobs, args.load, False, args.set)]["fifo"]
            base, base_wide = fifo["avg_jct_s"], fifo["wide_p99_s"]
            cells = []
            for label, row in rows.items():
                r = row["avg_jct_s"] / base
                by.setdefault(label, []).append(r)
                wide.setdefault(label, []).append(row["wide_p99_s"] / base_wide)
                cells.append(f"{label} {r:.3f}")
            print(f"seed {s}: fifo avg JCT {base / 3600:.2f} h | " + ", ".join(cells))
        for label, rs in by.items():
            w = wide[label]
            print(
                f"{label:20s} mean {sum(rs) / len(rs):.3f} worst {max(rs):.3f} | "
                f"wide-5% p99 vs fifo mean {sum(w) / len(w):.2f} worst {max(w):.2f}"
            )


if __name__ == "__main__":
    main()
