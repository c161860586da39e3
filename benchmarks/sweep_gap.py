"""Every-job-preemptible gittins against the SRTF oracle on several trace sets at once
(issue 16: <= 1.1x SRTF on 2,000 jobs, <= 1.15x on long runs), for candidate rules.

The computation of bench_targets' `all/srtf` column (`bench_targets.one`: the same
configs, traces and seeds) without Slurm alone's runs, which the ratio does not need.
Per --set (PolicyConfig overrides for gittins, JSON; several allowed) and per set:
mean / worst of all / SRTF over the seeds, and the most requeues of one job.

Sets: tuning (users, seeds 1-6, load 1.1), held (7-12), flat (--model flat, 1-6),
load1.0 / load1.3 (1-6), long (10,000 jobs, seeds 3-10, load 1.1: sustained backlog),
long30k / long30k1 (30,000 jobs, seed 2 / 1, load 1.1).

    .venv/bin/python benchmarks/sweep_gap.py --set '{}' --set '{"min_run_s": 4800}'
    .venv/bin/python benchmarks/sweep_gap.py --sets long --set '{}'
"""

from __future__ import annotations

import argparse
import os
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_targets import one  # noqa: E402

# name: (seeds, jobs, load, model)
SETS = {
    "tuning": (range(1, 7), 2000, 1.1, "users"),
    "held": (range(7, 13), 2000, 1.1, "users"),
    "flat": (range(1, 7), 2000, 1.1, "flat"),
    "load1.0": (range(1, 7), 2000, 1.0, "users"),
    "load1.3": (range(1, 7), 2000, 1.3, "users"),
    "long": (range(3, 11), 10000, 1.1, "users"),
    "long30k": (range(2, 3), 30000, 1.1, "users"),
    "long30k1": (range(1, 2), 30000, 1.1, "users"),
}


def task(seed: int, n: int, load: float, label: str, overrides: str, model: str) -> tuple:
    return (seed, n, load, label, overrides, "consolidate", 0, False, model, 10, "{}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], help="overrides (JSON), repeatable")
    ap.add_argument("--sets", default="tuning,held,flat,load1.0,load1.3", help="comma list")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    rules = args.set or ["{}"]
    names = args.sets.split(",")
    tasks = []
    for name in names:
        seeds, n, load, model = SETS[name]
        for s in seeds:
            tasks.append(task(s, n, load, "srtf", "{}", model))
            tasks += [task(s, n, load, "all", r, model) for r in rules]
    with Pool(args.workers) as pool:
        res = dict(pool.map(one, tasks))
    for r in rules:
        cells = []
        for name in names:
            seeds, n, load, model = SETS[name]
            ratios = [
                res[task(s, n, load, "all", r, model)]["avg"]
                / res[task(s, n, load, "srtf", "{}", model)]["avg"]
                for s in seeds
            ]
            most = max(res[task(s, n, load, "all", r, model)]["max_pre"] for s in seeds)
            cells.append(f"{name} {sum(ratios) / len(ratios):.3f}/{max(ratios):.3f} (req {most})")
        print(f"{r}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
