"""Issue 16's target table, per seed, against Slurm alone on the Slurm scheduler model.

Traces: `sim.users.synth_user_jobs` (recurring users), 64 GPUs (8 x 8), offered load
--load, the simulator's Slurm model (`scheduler = "slurm"`: main scheduler + backfill
with reservations from time limits). Per seed it runs:
  slurm      Slurm alone: fifo, no preemption (the baseline, ratio 1)
  np         the shipped gittins defaults, no preemption
  sjf        the SJF oracle, no preemption (a bound for np, not a policy)
  half       gittins, preemptive, half the jobs preemptible, checkpoint every 15 min
  all        gittins, preemptive, every job preemptible, checkpoint every 15 min
  srtf       the SRTF oracle, every job preemptible, checkpoint every 15 min
and prints avg JCT / Slurm alone's for each, all / srtf, the p99 JCT of the widest 5%
of jobs relative to Slurm alone's (np, half, all), the worst user's avg JCT relative to
that user's under Slurm alone (np; users with >= 10 jobs), and the most preemptions
of one job (all), and the mean wait to first start of 4- and 8-GPU jobs (slurm, np).
--placement picks the placement of every run (consolidate: Tiresias scoring, fewest
nodes then best fit; spread: any free GPUs, first fit). Slurm alone here has no fair-share factor (the simulator does not
model one): the per-user column compares with plain FIFO + backfill.

    .venv/bin/python benchmarks/bench_targets.py --seeds 1-6 --jobs 2000
    .venv/bin/python benchmarks/bench_targets.py --seeds 7-12 --set '{"max_preemptions": 20}'
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from multiprocessing import Pool

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.metrics import percentile
from slurm_ext.sim.users import synth_user_jobs

CKPT = 900.0
# the oracle as it was: every victim the rule may take, no cost weighed, no cap
SRTF = PolicyConfig(policy="srtf", preemption_cost=False, max_preemptions=0)


def runs(
    overrides: dict, placement: str = "consolidate"
) -> dict[str, tuple[PolicyConfig, SimConfig]]:
    base = SimConfig(nodes=8, gpus_per_node=8, placement=placement)
    g = replace(PolicyConfig(), **overrides)
    pre = replace(base, preemptive=True, checkpoint_interval_s=CKPT)
    return {
        "slurm": (PolicyConfig(policy="fifo"), replace(base, preemptive=False)),
        "np": (g, replace(base, preemptive=False)),
        "sjf": (PolicyConfig(policy="sjf"), replace(base, preemptive=False)),
        "half": (g, replace(pre, preemptible_fraction=0.5)),
        "all": (g, replace(pre, preemptible_fraction=1.0)),
        "srtf": (SRTF, replace(pre, preemptible_fraction=1.0)),
    }


def wide_p99(jobs) -> float:
    """p99 JCT of the widest 5% of jobs (by GPUs, ties by submit order)."""
    wide = sorted(jobs, key=lambda j: (-j.gpus, j.submit))[: max(1, len(jobs) // 20)]
    return percentile(sorted(j.finish - j.submit for j in wide), 99)


def per_user(jobs) -> dict[str, float]:
    """Avg JCT per user with at least 10 jobs."""
    by: dict[str, list[float]] = {}
    for j in jobs:
        by.setdefault(j.user, []).append(j.finish - j.submit)
    return {u: sum(v) / len(v) for u, v in by.items() if len(v) >= 10}


def one(args: tuple) -> tuple[tuple, dict]:
    seed, n, load, label, overrides, placement = args
    cfg, cl = runs(json.loads(overrides), placement)[label]
    trace = synth_user_jobs(n, 64, load=load, seed=seed)
    sim = Simulator(trace, cfg, replace(cl, seed=seed))
    jobs = sim.run()
    done = [j for j in jobs if j.finish is not None]
    return args, {
        "avg": sum(j.finish - j.submit for j in done) / len(done),
        "wide": wide_p99(done),
        "users": per_user(done),
        "max_pre": max((j.preemptions for j in jobs), default=0),
        "wait48": {g: avg_wait([j for j in done if j.gpus == g]) for g in (4, 8)},
    }


def avg_wait(jobs) -> float:
    """Mean time from submit to first start, hours."""
    return sum(j.first_start - j.submit for j in jobs) / max(1, len(jobs)) / 3600


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-6", help="seed range, e.g. 1-6")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for gittins")
    ap.add_argument("--only", default="", help="comma list of runs (default all)")
    ap.add_argument("--placement", default="consolidate", help="consolidate|spread|profile")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    labels = list(runs({}))
    if args.only:
        labels = ["slurm"] + [x for x in args.only.split(",") if x != "slurm"]
    ss = seeds(args.seeds)
    key = (args.set, args.placement)
    tasks = [(s, args.jobs, args.load, lab, *key) for s in ss for lab in labels]
    with Pool(args.workers) as pool:
        res = dict(pool.map(one, tasks))
    print(
        f"# {args.jobs} jobs, 64 GPUs, load {args.load}, slurm model, "
        f"placement {args.placement}, overrides {args.set}"
    )
    cols = [x for x in labels if x != "slurm"]
    head = " ".join(f"{c:>6s}" for c in cols)
    print(f"seed  slurm_h {head}  all/srtf wide(np,half,all) user_np max_pre")
    sums: dict[str, list[float]] = {}
    slurm_h: list[float] = []
    for s in ss:
        get = {lab: res[(s, args.jobs, args.load, lab, *key)] for lab in labels}
        base = get["slurm"]
        slurm_h.append(base["avg"] / 3600)
        r = {c: get[c]["avg"] / base["avg"] for c in cols}
        row = [r[c] for c in cols]
        extra = {}
        if "all" in r and "srtf" in r:
            extra["all/srtf"] = get["all"]["avg"] / get["srtf"]["avg"]
        for c in ("np", "half", "all"):
            if c in get:
                extra[f"wide_{c}"] = get[c]["wide"] / base["wide"]
        if "np" in get:
            bu = base["users"]
            extra["user_np"] = max(v / bu[u] for u, v in get["np"]["users"].items() if u in bu)
        for g in (4, 8):  # mean wait (h) to first start of 4- and 8-GPU jobs, Slurm alone / np
            extra[f"wait{g}_slurm_h"] = base["wait48"][g]
            if "np" in get:
                extra[f"wait{g}_np_h"] = get["np"]["wait48"][g]
        if "all" in get:
            extra["max_pre"] = float(get["all"]["max_pre"])
        for k, v in list(r.items()) + list(extra.items()):
            sums.setdefault(k, []).append(v)
        cells = " ".join(f"{x:6.3f}" for x in row)
        more = " ".join(f"{k}={v:.2f}" for k, v in extra.items())
        print(f"{s:4d} {base['avg'] / 3600:8.2f} {cells}  {more}")
    print(f"slurm alone avg JCT mean {sum(slurm_h) / len(slurm_h):.3f} h")
    print(
        "mean/worst: "
        + ", ".join(f"{k} {sum(v) / len(v):.3f}/{max(v):.3f}" for k, v in sums.items())
    )


if __name__ == "__main__":
    main()
