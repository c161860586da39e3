"""Per-job diagnosis of the preemptive gap to the SRTF oracle (issue 16: every job
preemptible <= 1.1x SRTF).

Runs gittins with every job preemptible (`bench_targets.runs()["all"]`, --set overrides)
and the SRTF oracle on the same traces (bench_targets': recurring users or --model flat,
8 x 8 GPUs, checkpoint 900 s) and sums, over the seeds, each job's JCT difference by
class (GPU width x true GPU-time), split into waiting (JCT - wall time held) and held
time beyond the job's work (lost work since the last checkpoint, restart overhead); the
requeues per class in both runs; and, for the gittins run, how many jobs of the class
the wait guard or the starvation guard lifted at a start.

    .venv/bin/python benchmarks/diag_gap.py --seeds 1-6
    .venv/bin/python benchmarks/diag_gap.py --seeds 1-6 --set '{"wait_guard_factor": 0}'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_longrun import Watched, trace  # noqa: E402
from bench_targets import runs, seeds  # noqa: E402

H = 3600.0
WIDTHS = (1, 2, 4, 8, 16)  # a width class is the widths up to the next one
GPU_H = (0.0, 1 / 6, 1.0, 4.0, 16.0, 64.0, math.inf)  # true GPU-time edges, GPU-hours


def width_class(gpus: int) -> int:
    return max(w for w in WIDTHS if w <= gpus)


def size_class(gpu_s: float) -> str:
    h = gpu_s / H
    for lo, hi in zip(GPU_H, GPU_H[1:]):
        if lo <= h < hi:
            return f"{lo:.3g}-{hi:.3g}"
    return "?"


class Lifted(Watched):
    """`Watched` that also keeps the ids of the jobs a guard lifted at a start."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.lifted_ids: set[int] = set()

    def _start(self, job, alloc, now: float) -> None:
        super()._start(job, alloc, now)
        if job.promoted_at is not None:
            self.lifted_ids.add(job.id)


def run(label: str, overrides: dict, model: str, n: int, load: float, seed: int):
    cfg, cl = runs(overrides if label == "all" else {})[label]
    sim = Lifted(trace(model, n, load, seed), cfg, replace(cl, seed=seed))
    jobs = sim.run()
    return sim, {j.id: j for j in jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--model", default="users", help="users (default) | flat")
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for gittins")
    args = ap.parse_args()
    overrides = json.loads(args.set)
    # cell -> [jobs, gap, wait gap, held gap, requeues gittins, requeues srtf, guard lifts]
    cells: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0] * 7)
    total_a = total_b = 0.0
    lifts = {"starvation": 0, "wait": 0}
    for s in seeds(args.seeds):
        sim, a = run("all", overrides, args.model, args.jobs, args.load, s)
        _, b = run("srtf", {}, args.model, args.jobs, args.load, s)
        for k in lifts:
            lifts[k] += sim.lifts[k]
        lifted = sim.lifted_ids
        for i, ja in a.items():
            jb = b[i]
            c = cells[(width_class(ja.gpus), size_class(ja.gpus * ja.duration))]
            jct_a, jct_b = ja.finish - ja.submit, jb.finish - jb.submit
            wait_a, wait_b = jct_a - ja.executed, jct_b - jb.executed
            c[0] += 1
            c[1] += (jct_a - jct_b) / H
            c[2] += (wait_a - wait_b) / H
            c[3] += (ja.executed - jb.executed) / H
            c[4] += ja.preemptions
            c[5] += jb.preemptions
            c[6] += i in lifted
            total_a += jct_a
            total_b += jct_b
    gap = (total_a - total_b) / H
    print(
        f"# {args.model}, seeds {args.seeds}, {args.jobs} jobs, load {args.load}, overrides "
        f"{args.set}: gittins/SRTF avg JCT {total_a / total_b:.3f}, gap {gap:.0f} JCT-h; "
        f"guard lifts at starts {lifts}"
    )
    print(
        f"{'gpus':>4s} {'GPU-h':>9s} {'jobs':>5s} {'gap h':>8s} {'gap %':>6s} {'wait h':>8s}"
        f" {'held h':>7s} {'req g':>6s} {'req s':>6s} {'lifted':>6s}"
    )
    for (w, sz), c in sorted(cells.items(), key=lambda kv: -kv[1][1]):
        print(
            f"{w:4d} {sz:>9s} {c[0]:5.0f} {c[1]:8.0f} {100 * c[1] / gap:6.1f} {c[2]:8.0f}"
            f" {c[3]:7.0f} {c[4]:6.0f} {c[5]:6.0f} {c[6]:6.0f}"
        )
    for name, pick in (("width", 0), ("GPU-h", 1)):
        agg: dict = defaultdict(lambda: [0.0] * 7)
        for k, c in cells.items():
            agg[k[pick]] = [x + y for x, y in zip(agg[k[pick]], c)]
        print(
            f"by {name}: "
            + ", ".join(f"{k} {100 * c[1] / gap:.0f} %" for k, c in sorted(agg.items()))
        )


if __name__ == "__main__":
    main()
