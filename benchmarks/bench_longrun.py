"""Where a long preemptive run loses to the SRTF oracle (issue 16's long-run target).

Runs gittins (every job preemptible, checkpoint 900 s, `bench_targets.runs()["all"]`,
with --set overrides) and the SRTF oracle on one recurring-user trace (--model flat: the
independent-jobs one) and prints, per job group (GPU-time, GPUs, run time, submit
decile), both runs' avg JCT and the group's share of the difference; the guards' lifts
(starvation guard, wait guard at a job's start), the share of pending jobs the wait guard
lifts and of busy GPUs that guard-kept stints hold, sampled hourly while jobs arrive and
after the last arrival (the drain); the history window's bias under the backlog (mean
GPU-time of the last `history_window` completions against the jobs submitted so far);
requeues per job (most, jobs over 50); CPU seconds of each run.

    .venv/bin/python benchmarks/bench_longrun.py --jobs 30000 --load 1.1 --seed 2
    .venv/bin/python benchmarks/bench_longrun.py --jobs 10000 --seed 3 --set '{"starvation_scope": "all"}'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import slurm_ext.sim.engine as engine
from slurm_ext.policy.queues import starvation_lifts
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.users import synth_user_jobs

sys.path.insert(0, str(Path(__file__).parent))
from bench_targets import runs  # noqa: E402

H = 3600.0
SIZE_EDGES = [0.0, 600.0, H, 4 * H, 16 * H, 64 * H, math.inf]  # GPU-seconds / run seconds


class Watched(engine.Simulator):
    """A run that counts the guards' lifts at starts and samples, hourly, the pending
    jobs the wait guard lifts and the GPUs held by stints that keep a guard's rank."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.lifts = {"starvation": 0, "wait": 0}
        self.samples: list[tuple[float, int, int, int, int]] = []

    def _start(self, job: SimJob, alloc: list[tuple[str, int]], now: float) -> None:
        # the engine's own test (`_start`): the starvation guard, else the wait guard
        starved = starvation_lifts(
            self.cfg, self.table, now, False, job.last_run, job.waiting_since, job.submit,
            job.gpus, job.attained, job.user, job.name, job.account, job.limit,
        )  # fmt: skip
        super()._start(job, alloc, now)
        if job.promoted_at is not None:
            self.lifts["starvation" if starved else "wait"] += 1

    def _pass(self, now: float, policy_acts: bool = True) -> None:
        super()._pass(now, policy_acts)
        if self.samples and now - self.samples[-1][0] < H:
            return
        pend = [j for j in self.jobs if j.finish is None and not j.running and j.submit <= now]
        lifted = sum(1 for j in pend if j.key and j.key[2] == -math.inf)
        busy = sum(j.gpus for j in self.state.running_jobs)
        kept = sum(j.gpus for j in self.state.running_jobs if j.key and j.key[2] == -math.inf)
        self.samples.append((now, len(pend), lifted, busy, kept))


def trace(model: str, n: int, load: float, seed: int):
    if model == "flat":
        return fill_time_limits(synth_jobs(n, 64, load=load, seed=seed), seed)
    return synth_user_jobs(n, 64, load=load, seed=seed)


def jct(j: SimJob) -> float:
    return j.finish - j.submit


def groups(jobs: list[SimJob]) -> list[tuple[str, list[int]]]:
    out = []
    for name, size in (("GPU-h", lambda j: j.gpus * j.duration), ("run h", lambda j: j.duration)):
        for lo, hi in zip(SIZE_EDGES, SIZE_EDGES[1:]):
            ids = [j.id for j in jobs if lo <= size(j) < hi]
            if ids:
                out.append((f"{name} {lo / H:.3g}-{hi / H:.3g}", ids))
    for g in sorted({j.gpus for j in jobs}):
        out.append((f"{g} GPUs", [j.id for j in jobs if j.gpus == g]))
    order = sorted(jobs, key=lambda j: j.submit)
    for k in range(10):
        out.append(
            (f"submit decile {k}", [j.id for j in order[k * len(jobs) // 10 :][: len(jobs) // 10]])
        )
    return out


def sampled(samples: list, lo: float, hi: float) -> str:
    ss = [s for s in samples if lo <= s[0] < hi]
    if not ss:
        return "-"
    pend, lifted = sum(s[1] for s in ss), sum(s[2] for s in ss)
    busy, kept = sum(s[3] for s in ss), sum(s[4] for s in ss)
    return (
        f"mean pending {pend / len(ss):.0f}, wait-guard-lifted {100 * lifted / max(1, pend):.1f} %"
        f" of pending, guard-kept stints {100 * kept / max(1, busy):.1f} % of busy GPUs"
    )


def window_bias(jobs: list[SimJob], window: int) -> str:
    last = max(j.submit for j in jobs)
    parts = []
    for frac in (0.25, 0.5, 1.0):
        t = frac * last
        sub = [j.gpus * j.duration for j in jobs if j.submit <= t]
        done = sorted((j for j in jobs if j.finish <= t), key=lambda j: j.finish)[-window:]
        mean_done = sum(j.gpus * j.duration for j in done) / max(1, len(done))
        backlog = sum(1 for j in jobs if j.submit <= t < j.finish)
        parts.append(
            f"{frac:g} x last arrival: window {mean_done / H:.1f} GPU-h vs submitted "
            f"{sum(sub) / len(sub) / H:.1f}, {backlog} jobs in the system"
        )
    return "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--load", type=float, default=1.1)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--model", default="users", help="users (default) | flat")
    ap.add_argument("--set", default="{}", help="PolicyConfig overrides (JSON) for gittins")
    args = ap.parse_args()
    tr = trace(args.model, args.jobs, args.load, args.seed)
    done = {}
    for label in ("all", "srtf"):
        cfg, cl = runs(json.loads(args.set) if label == "all" else {})[label]
        t0 = time.process_time()
        sim = Watched(tr, cfg, replace(cl, seed=args.seed))
        jobs = sim.run()
        done[label] = (sim, {j.id: j for j in jobs}, time.process_time() - t0)
    sim, a, cpu_a = done["all"]
    _, b, cpu_b = done["srtf"]
    avg_a = sum(map(jct, a.values())) / len(a)
    avg_b = sum(map(jct, b.values())) / len(b)
    print(
        f"# {args.model} model, {args.jobs} jobs, 64 GPUs, load {args.load}, seed {args.seed}, "
        f"overrides {args.set}: gittins {avg_a / H:.2f} h, SRTF {avg_b / H:.2f} h, "
        f"ratio {avg_a / avg_b:.3f}; CPU s {cpu_a:.0f} + {cpu_b:.0f}"
    )
    pre = [j.preemptions for j in a.values()]
    print(
        f"requeues: {sum(pre)}, most of one job {max(pre)}, jobs over 50: {sum(p > 50 for p in pre)}"
    )
    gap = sum(jct(a[i]) - jct(b[i]) for i in a) or 1.0
    print(f"{'group':24s} {'jobs':>6s} {'gittins h':>10s} {'srtf h':>8s} {'gap %':>7s}")
    for name, ids in groups(list(a.values())):
        ga = sum(jct(a[i]) for i in ids) / len(ids) / H
        gb = sum(jct(b[i]) for i in ids) / len(ids) / H
        share = 100 * sum(jct(a[i]) - jct(b[i]) for i in ids) / gap
        print(f"{name:24s} {len(ids):6d} {ga:10.2f} {gb:8.2f} {share:7.1f}")
    last = max(j.submit for j in a.values())
    print(f"guard lifts at starts: {sim.lifts}")
    print(f"while jobs arrive: {sampled(sim.samples, 0.0, last)}")
    print(
        f"drain ({(max(j.finish for j in a.values()) - last) / H:.0f} h): {sampled(sim.samples, last, math.inf)}"
    )
    print(f"history window: {window_bias(list(a.values()), sim.cfg.history_window)}")


if __name__ == "__main__":
    main()
