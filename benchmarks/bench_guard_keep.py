"""The wait guard's flip, counted: how often a stint the wait guard started is requeued,
and how long it ran first, with and without `wait_guard_keep`.

Traces and runs as `bench_targets.py` (recurring users, 64 GPUs, load 1.1, the Slurm
scheduler model; half: half the jobs preemptible, all: every job, checkpoint every
15 min). Per run: avg JCT / Slurm alone's, requeues in all, requeues of stints the wait
guard started (the thrash) and the median wall seconds such a stint ran before its
requeue, and the lost work (GPU-hours).

    .venv/bin/python benchmarks/bench_guard_keep.py --seeds 1-6 --keep 0,1,2
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from multiprocessing import Pool

from bench_targets import runs, seeds

from slurm_ext.policy.guards import wait_guarded
from slurm_ext.sim.engine import Simulator
from slurm_ext.sim.metrics import percentile
from slurm_ext.sim.users import synth_user_jobs


class Counted(Simulator):
    """A run that notes which stints the wait guard started and which of them a requeue
    ended, and after how long."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.guard_started: set[int] = set()  # jobs whose current stint the guard started
        self.guard_requeued: list[float] = []  # those stints' run before the requeue, s

    def _start(self, job, alloc, now: float) -> None:
        if wait_guarded(
            self.cfg, self.table, now, job.gpus, job.attained, job.waiting_since,
            job.user, job.name, job.account, job.limit,
        ):  # fmt: skip
            self.guard_started.add(job.id)
        else:
            self.guard_started.discard(job.id)
        super()._start(job, alloc, now)

    def _preempt(self, job, now: float, release: bool = False) -> None:
        if job.id in self.guard_started:
            self.guard_requeued.append(now - job.start)
            self.guard_started.discard(job.id)
        super()._preempt(job, now, release)


def one(task: tuple) -> tuple[tuple, dict]:
    seed, n, load, label, keep = task
    cfg, cl = runs({"wait_guard_keep": keep})[label]
    sim = Counted(synth_user_jobs(n, 64, load=load, seed=seed), cfg, replace(cl, seed=seed))
    jobs = sim.run()
    return task, {
        "avg": sum(j.finish - j.submit for j in jobs) / len(jobs),
        "requeues": sim.preemptions,
        "guard": len(sim.guard_requeued),
        "guard_ran": percentile(sorted(sim.guard_requeued), 50) if sim.guard_requeued else 0.0,
        "lost_h": sim.lost_work_gpu_s / 3600,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--keep", default="0,1", help="wait_guard_keep values, comma list")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    keeps = [float(k) for k in args.keep.split(",")]
    ss = seeds(args.seeds)
    tasks = [(s, args.jobs, args.load, "slurm", 0.0) for s in ss]
    tasks += [
        (s, args.jobs, args.load, lab, k) for s in ss for lab in ("half", "all") for k in keeps
    ]
    with Pool(args.workers) as pool:
        res = dict(pool.map(one, tasks))
    print(f"# {args.jobs} jobs, 64 GPUs, load {args.load}, seeds {args.seeds}")
    print("run   keep  avg/slurm  requeues  guard_requeued  guard_ran_med_s  lost_gpu_h")
    summary = {}
    for lab in ("half", "all"):
        for k in keeps:
            rows = [
                (
                    res[(s, args.jobs, args.load, lab, k)],
                    res[(s, args.jobs, args.load, "slurm", 0.0)],
                )
                for s in ss
            ]
            r = {
                "avg/slurm": sum(a["avg"] / b["avg"] for a, b in rows) / len(rows),
                "requeues": sum(a["requeues"] for a, _ in rows) / len(rows),
                "guard": sum(a["guard"] for a, _ in rows) / len(rows),
                "guard_ran": sum(a["guard_ran"] for a, _ in rows) / len(rows),
                "lost_h": sum(a["lost_h"] for a, _ in rows) / len(rows),
            }
            summary[f"{lab} keep={k:g}"] = r
            print(
                f"{lab:5s} {k:4g}  {r['avg/slurm']:9.3f}  {r['requeues']:8.0f}  "
                f"{r['guard']:14.1f}  {r['guard_ran']:15.0f}  {r['lost_h']:10.0f}"
            )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
