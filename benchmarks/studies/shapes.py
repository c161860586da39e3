"""Do the shipped defaults hold on trace shapes nobody tuned on?

Every tuning so far used `sim.users` traces of one shape (2,000 jobs, 8 x 8 GPUs, load
1.1, 40 users, 10 % one-off kinds, `synth.GPU_CHOICES` widths) plus the flat model.
This runs targets.py' runs (`targets.runs`: the Slurm model, consolidated
placement, checkpoint 900 s) on a grid of other shapes, one factor changed from that
base at a time (cluster size, load, share of one-off kinds, users and their skew, width
mix, a kind's run-time spread, job count, the flat model) and four two-factor shapes,
on seeds never used for tuning (default 101-105; docs/benchmarks.md used 101-120):
  slurm  Slurm alone (fifo, no preemption; ratio 1)
  np     the shipped gittins defaults, no preemption
  all    gittins, every job preemptible
  srtf   the SRTF oracle, every job preemptible (a bound, not a policy)
and prints per shape the avg JCT vs Slurm alone's: mean / worst over the seeds and the
seeds above 1.0x. --diag adds, for each shape where np loses (mean above 1.0, or half
the seeds or more above), where np's extra JCT-hours over Slurm alone go (by width, by
true GPU-time, by one-off vs recurring kind, the users' widths that gain or pay most).

    nice -n 19 .venv/bin/python -m benchmarks.studies.shapes --seeds 101-120 --diag
    nice -n 19 .venv/bin/python -m benchmarks.studies.shapes --shapes users5+noisy --diag \
        --only np,sjf,half,all
    nice -n 19 .venv/bin/python -m benchmarks.studies.shapes --only np --set '{"min_run_s": 600}'
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from multiprocessing import Pool

from benchmarks.studies.targets import runs, seeds
from slurm_ext.sim.engine import Simulator
from slurm_ext.sim.synth import GpuMix, synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.users import SIGMA_WITHIN, UserModel, synth_user_jobs

H = 3600.0
WIDTHS = (1, 2, 4, 8, 16)  # a width class is the widths up to the next one
GPU_H = (0.0, 1 / 6, 1.0, 4.0, 16.0, 64.0, math.inf)  # true GPU-time edges, GPU-hours
# width mixes other than synth.GPU_CHOICES (70 % 1-GPU, 2 % 16-GPU)
MIXES: dict[str, GpuMix] = {
    "wide": ((1, 0.30), (2, 0.15), (4, 0.20), (8, 0.25), (16, 0.10)),
    "narrow": ((1, 0.90), (2, 0.05), (4, 0.03), (8, 0.02)),
}


@dataclass(frozen=True)
class Shape:
    """One trace shape; the defaults are the tuning set's."""

    model: str = "users"  # users | flat
    jobs: int = 2000
    nodes: int = 8  # x 8 GPUs
    load: float = 1.1
    users: int = 40
    p_oneoff: float = 0.1
    mix: str = ""  # a MIXES key, "" for synth.GPU_CHOICES
    sigma_within: float = SIGMA_WITHIN  # a kind's run-time spread: how much history tells
    user_skew: float = 1.0


SHAPES: dict[str, Shape] = {
    "base": Shape(),
    "gpus16": Shape(nodes=2),
    "gpus256": Shape(nodes=32),
    "gpus256j5k": Shape(nodes=32, jobs=5000),
    "load0.7": Shape(load=0.7),
    "load1.0": Shape(load=1.0),
    "load1.5": Shape(load=1.5),
    "oneoff0.5": Shape(p_oneoff=0.5),
    "oneoff0.9": Shape(p_oneoff=0.9),
    "users5": Shape(users=5),
    "users400": Shape(users=400),
    "wide": Shape(mix="wide"),
    "narrow": Shape(mix="narrow"),
    "noisy": Shape(sigma_within=2.0),
    "skew0": Shape(user_skew=0.0),
    "skew2": Shape(user_skew=2.0),
    "flat": Shape(model="flat"),
    "jobs500": Shape(jobs=500),
    "jobs5000": Shape(jobs=5000),
    # two factors at once: little history on a small or lightly loaded cluster
    "oneoff0.9+load1.0": Shape(p_oneoff=0.9, load=1.0),
    "oneoff0.9+gpus16": Shape(p_oneoff=0.9, nodes=2),
    "users5+noisy": Shape(users=5, sigma_within=2.0),
}


def width_class(gpus: int) -> int:
    return max(w for w in WIDTHS if w <= gpus)


def size_class(gpu_s: float) -> str:
    h = gpu_s / H
    for lo, hi in zip(GPU_H, GPU_H[1:]):
        if lo <= h < hi:
            return f"{lo:.3g}-{hi:.3g}"
    return "?"


def trace(shape: Shape, seed: int):
    gpus = 8 * shape.nodes
    mix = MIXES[shape.mix] if shape.mix else None
    kw = {"gpu_choices": mix} if mix else {}
    if shape.model == "flat":
        return fill_time_limits(synth_jobs(shape.jobs, gpus, shape.load, seed, **kw), seed)
    model = UserModel(
        users=shape.users,
        p_oneoff=shape.p_oneoff,
        sigma_within=shape.sigma_within,
        user_skew=shape.user_skew,
    )
    return synth_user_jobs(shape.jobs, gpus, shape.load, seed, model, **kw)


def one(args: tuple) -> tuple[tuple, dict]:
    """One run: avg JCT, and per job (id order) its width, true GPU-time, user, one-off
    flag and JCT (for --diag)."""
    name, seed, label, overrides = args
    shape = SHAPES[name]
    cfg, cl = runs(json.loads(overrides) if label != "slurm" else {}, nodes=shape.nodes)[label]
    tr = trace(shape, seed)
    t0 = time.process_time()
    jobs = Simulator(tr, cfg, replace(cl, seed=seed)).run()
    cpu = time.process_time() - t0
    # sim.users names a one-off kind "<model>-<index>", the index 1000 or more; the flat
    # model's jobs have no kind at all (counted as one-off: nothing to learn from)
    oneoff = {t.job_id: not t.job_name or int(t.job_name.rsplit("-", 1)[1]) >= 1000 for t in tr}
    unfinished = sum(j.finish is None for j in jobs)
    if unfinished:
        raise RuntimeError(f"{name} seed {seed} {label}: {unfinished} jobs never finished")
    per = [
        (j.gpus, j.gpus * j.duration, j.user, oneoff.get(j.id, False), j.finish - j.submit)
        for j in sorted(jobs, key=lambda j: j.id)
    ]
    return args, {"avg": sum(p[4] for p in per) / len(per), "jobs": per, "cpu": cpu}


def diag(name: str, pairs: list[tuple[list, list]]) -> None:
    """Where np's extra JCT-hours over Slurm alone go, summed over the seeds."""
    cells: dict[str, dict] = {
        k: defaultdict(lambda: [0, 0.0]) for k in ("width", "GPU-h", "kind", "user/width")
    }
    total = 0.0
    for base, np_ in pairs:
        for b, a in zip(base, np_, strict=True):
            d = (a[4] - b[4]) / H
            total += d
            for k, key in (
                ("width", width_class(b[0])),
                ("GPU-h", size_class(b[1])),
                ("kind", "one-off" if b[3] else "recurring"),
                ("user/width", f"{b[2]}/{b[0]}"),
            ):
                c = cells[k][key]
                c[0] += 1
                c[1] += d
    print(f"  diag {name}: np - slurm {total:+.0f} JCT-h over the seeds")
    for k, agg in cells.items():
        items = sorted(agg.items(), key=lambda kv: -abs(kv[1][1]))
        if k == "user/width":
            items = items[:6]
        elif k != "kind":
            items = sorted(agg.items(), key=lambda kv: str(kv[0]).zfill(8))
        print(f"    by {k}: " + ", ".join(f"{key} ({c[0]}) {c[1]:+.0f}" for key, c in items))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="101-105", help="seed range (1-42 were tuned on)")
    ap.add_argument("--shapes", default="", help="comma list of SHAPES (default all)")
    ap.add_argument("--only", default="np,all,srtf", help="runs besides slurm")
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for gittins")
    ap.add_argument("--diag", action="store_true", help="per-job breakdown where np loses")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    names = args.shapes.split(",") if args.shapes else list(SHAPES)
    bad = [n for n in names if n not in SHAPES]
    if bad:
        raise SystemExit(f"unknown shapes {bad}; known: {', '.join(SHAPES)}")
    cols = [c for c in args.only.split(",") if c and c != "slurm"]
    ss = seeds(args.seeds)
    tasks = [(n, s, lab, args.set) for n in names for s in ss for lab in ["slurm", *cols]]
    t0 = time.time()
    if args.workers > 1:
        with Pool(args.workers) as pool:
            res = dict(pool.map(one, tasks))
    else:
        res = dict(map(one, tasks))
    print(
        f"# shapes vs Slurm alone (fifo, no preemption), seeds {args.seeds}, overrides "
        f"{args.set}; avg JCT ratio mean / worst (seeds above 1.0x); {len(tasks)} runs, "
        f"{time.time() - t0:.0f} s wall, {sum(r['cpu'] for r in res.values()):.0f} CPU s simulating"
    )
    print(f"{'shape':18s} {'slurm_h':>8s} " + " ".join(f"{c:>18s}" for c in cols))
    losing = []
    for n in names:
        base = [res[(n, s, "slurm", args.set)] for s in ss]
        cells = []
        for c in cols:
            r = [res[(n, s, c, args.set)]["avg"] / b["avg"] for s, b in zip(ss, base)]
            above = sum(x > 1.0 for x in r)
            cells.append(f"{sum(r) / len(r):.3f} / {max(r):.3f} ({above})")
            if c == "np" and (sum(r) / len(r) > 1.0 or 2 * above >= len(ss)):
                losing.append(n)
        slurm_h = sum(b["avg"] for b in base) / len(base) / H
        print(f"{n:18s} {slurm_h:8.2f} " + " ".join(f"{x:>18s}" for x in cells))
    print(
        f"np loses (mean above 1.0 or half the seeds or more above): {', '.join(losing) or 'none'}"
    )
    if args.diag and "np" in cols:
        for n in losing:
            diag(
                n,
                [
                    (res[(n, s, "slurm", args.set)]["jobs"], res[(n, s, "np", args.set)]["jobs"])
                    for s in ss
                ],
            )


if __name__ == "__main__":
    main()
