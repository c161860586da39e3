"""Policy settings swept over many seeded traces, against the best SRTF oracle.

How the session-3 defaults were chosen (docs/benchmarks.md): each setting runs on a
tuning set (10k-job traces: load 1.05 seeds 1-12, loads 1.0 and 1.1 seeds 1-6) and a
held-out set (load 1.05 seeds 13-24, load 1.1 seeds 7-12, 2k-job traces seeds 1-12);
the ratio is gittins avg JCT / the best SRTF avg JCT over min_run_s 0/300/600/1200.
Prints mean and worst ratio per set and per load. Slow: ~3 min per setting on 2 cores
(the SRTF runs are cached in --cache).

    .venv/bin/python benchmarks/sweep_policy.py '{}' '{"starvation_factor": 320}'
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
from dataclasses import replace
from multiprocessing import Pool

from bench_sim import ORACLE_MIN_RUN_S, run_one  # this directory (run as a script)

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.synth import synth_jobs

TUNING = [(10000, 1.05, s) for s in range(1, 13)]
TUNING += [(10000, load, s) for load in (1.0, 1.1) for s in range(1, 7)]
HELD_OUT = [(10000, 1.05, s) for s in range(13, 25)] + [(10000, 1.1, s) for s in range(7, 13)]
HELD_OUT += [(2000, 1.05, s) for s in range(1, 13)]


def avg_jct(args: tuple[tuple[int, float, int], tuple]) -> tuple[tuple, float]:
    (n, load, seed), settings = args
    trace = synth_jobs(n, 64, load=load, seed=seed)
    cfg = replace(PolicyConfig(), **dict(settings))
    cluster = SimConfig(nodes=8, gpus_per_node=8, scheduler="greedy")  # as measured then
    return args, run_one(trace, cfg, cluster)["avg_jct_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="+", help="PolicyConfig overrides as JSON objects")
    ap.add_argument("--cache", default=".sweep-srtf.pkl", help="SRTF results cache")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    traces = TUNING + HELD_OUT
    variants = [tuple(sorted(json.loads(s).items())) for s in args.settings]
    cache = {}
    if os.path.exists(args.cache):
        with open(args.cache, "rb") as fh:
            cache = pickle.load(fh)
    oracle = [(t, (("min_run_s", m), ("policy", "srtf"))) for t in traces for m in ORACLE_MIN_RUN_S]
    with Pool(args.workers) as pool:
        for key, jct in pool.map(avg_jct, [o for o in oracle if o not in cache], chunksize=4):
            cache[key] = jct
        with open(args.cache, "wb") as fh:
            pickle.dump(cache, fh)
        runs = dict(pool.map(avg_jct, [(t, v) for v in variants for t in traces], chunksize=3))
    best = {t: min(cache[(t, o)] for tt, o in oracle if tt == t) for t in traces}
    for v, text in zip(variants, args.settings, strict=True):
        for name, subset in (("tuning", TUNING), ("held-out", HELD_OUT)):
            ratios = {t: runs[(t, v)] / best[t] for t in subset}
            groups: dict[tuple[int, float], list[float]] = {}
            for (n, load, _), r in ratios.items():
                groups.setdefault((n, load), []).append(r)
            parts = [
                f"{n // 1000}k/{load}: {sum(g) / len(g):.3f} / {max(g):.3f}"
                for (n, load), g in sorted(groups.items())
            ]
            mean = sum(ratios.values()) / len(ratios)
            print(
                f"{text} {name}: mean / worst {mean:.3f} / {max(ratios.values()):.3f} | "
                + ", ".join(parts)
            )


if __name__ == "__main__":
    main()
