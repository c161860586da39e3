"""The target table, per seed, against Slurm alone on the Slurm scheduler model.

Traces: `sim.users.synth_user_jobs` (recurring users), 64 GPUs (8 x 8), offered load
--load, the simulator's Slurm model (`scheduler = "slurm"`: main scheduler + backfill
with reservations from time limits); --flood N adds a user who floods the queue with N
short 1-GPU jobs in 10 bursts (`sim.users.with_flooder`). Per seed it runs:
  slurm      Slurm alone, the yardstick for avg JCT: fifo, no preemption
             (`--policy fifo --scheduler slurm --no-preemptive`, ratio 1)
  fs         Slurm alone with its fair-share factor on: policy "fairshare"
             (multifactor, age + classic fair-share, policy/fairshare.py), no
             preemption; the per-user target's baseline
  np         the shipped gittins defaults, no preemption
  sjf        the SJF oracle, no preemption (a bound for np, not a policy)
  half       gittins, preemptive, half the jobs preemptible, checkpoint every 15 min
  all        gittins, preemptive, every job preemptible, checkpoint every 15 min
  srtf       the SRTF oracle, every job preemptible, checkpoint every 15 min
and prints avg JCT / Slurm alone's for each (mean / worst, and the seeds above 1.0x),
all / srtf, the p99 JCT of the widest 5% of jobs relative to Slurm alone's (fs, np,
half, all), the per-user avg JCT relative to that user's under Slurm alone with
fair-share (fs; np, half, all, and slurm
itself; users with >= --min-jobs jobs, default 10; the same jobs, all finished, in
every run): median (med_*), p90 (p90_*), worst (user_*) and share above 1.2x
(over_*); `--only fs2` adds fair-share Slurm with a 4-minute calc period, the per-user
ratio's noise floor; the avg JCT of the flooder's jobs and of everyone else's
relative to fs (with --flood), the
most preemptions of one job (all) and the jobs preempted more than 50 times
(over50, all), and with --frag the mean wait to first start of 4-
and 8-GPU jobs and the GPUs idle for fragmentation (slurm, np; `Measured`).
--placement picks the placement of every run (consolidate: Tiresias scoring, fewest
nodes then best fit, a job waits rather than take more nodes than it needs; spread:
any node set, the largest free nodes first and the last one best fit).

    .venv/bin/python -m benchmarks.studies.targets --seeds 1-6 --jobs 2000
    .venv/bin/python -m benchmarks.studies.targets --seeds 7-12 --set '{"max_preemptions": 20}'
    .venv/bin/python -m benchmarks.studies.targets --seeds 1-6 --flood 600 --only np
    .venv/bin/python -m benchmarks.studies.targets --seeds 1-6 --frag --only np --placement spread
    .venv/bin/python -m benchmarks.studies.targets --seeds 1-6 --only np --model flat
    .venv/bin/python -m benchmarks.studies.targets --seeds 1-12 --only fs2,np --min-jobs 20
--model flat runs `sim.synth` traces (jobs drawn independently, limits from
`fill_time_limits`) instead of recurring users, to check a rule on another shape.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from multiprocessing import Pool

from slurm_ext.core.fragmentation import stranded_gpus
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.metrics import percentile
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.users import FLOOD_USER, synth_user_jobs, with_flooder

CKPT = 900.0
# the oracle as it was: every victim the rule may take, no cost weighed, no cap
SRTF = PolicyConfig(policy="srtf", preemption_cost=False, max_preemptions=0)


def runs(
    overrides: dict,
    placement: str = "consolidate",
    sim_overrides: dict | None = None,
    nodes: int = 8,
) -> dict[str, tuple[PolicyConfig, SimConfig]]:
    """Each run's policy and cluster (`nodes` x 8 GPUs); `sim_overrides` (SimConfig
    fields, e.g. the Slurm model's `bf_whole_nodes`) apply to every run, Slurm alone's
    included."""
    base = SimConfig(nodes=nodes, gpus_per_node=8, placement=placement, **(sim_overrides or {}))
    g = replace(PolicyConfig(), **overrides)
    pre = replace(base, preemptive=True, checkpoint_interval_s=CKPT)
    return {
        "slurm": (PolicyConfig(policy="fifo"), replace(base, preemptive=False)),
        "fs": (PolicyConfig(policy="fairshare"), replace(base, preemptive=False)),
        # the noise floor of the per-user ratio: fair-share Slurm again, its calc period
        # 4 min instead of 5 (only with --only fs2)
        "fs2": (
            PolicyConfig(policy="fairshare", fairshare_calc_period_s=240.0),
            replace(base, preemptive=False),
        ),
        "np": (g, replace(base, preemptive=False)),
        "sjf": (PolicyConfig(policy="sjf"), replace(base, preemptive=False)),
        "half": (g, replace(pre, preemptible_fraction=0.5)),
        "all": (g, replace(pre, preemptible_fraction=1.0)),
        "srtf": (SRTF, replace(pre, preemptible_fraction=1.0)),
    }


class Measured(Simulator):
    """A run that also integrates the GPUs idle for fragmentation (`stranded_gpus`:
    while jobs wait, the free GPUs on nodes with fewer free than W = min(GPUs per node,
    the widest waiting job's GPUs)); and all free GPUs while jobs wait. Sampled after every
    scheduling pass and backfill pass, held constant until the next sample."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.frag_gpu_s = self.idle_gpu_s = 0.0
        self.last_t, self.last_frag, self.last_idle = 0.0, 0, 0

    def _sample(self, now: float) -> None:
        dt = now - self.last_t
        self.frag_gpu_s += dt * self.last_frag
        self.idle_gpu_s += dt * self.last_idle
        self.last_t = now
        widest = max(
            (
                b[0]
                for b, heap in self.keys.pending.items()
                if self.keys.top(heap, False) is not None
            ),
            default=0,
        )
        if not widest:
            self.last_frag = self.last_idle = 0
            return
        free = self.cluster.idx.free.values()
        self.last_idle = sum(free)
        self.last_frag = stranded_gpus(free, widest, self.cl.gpus_per_node)

    def _pass(self, now: float, policy_acts: bool = True) -> None:
        super()._pass(now, policy_acts)
        self._sample(now)

    def _backfill(self, now: float) -> None:
        super()._backfill(now)
        self._sample(now)


def wide_p99(jobs) -> float:
    """p99 JCT of the widest 5% of jobs (by GPUs, ties by submit order)."""
    wide = sorted(jobs, key=lambda j: (-j.gpus, j.submit))[: max(1, len(jobs) // 20)]
    return percentile(sorted(j.finish - j.submit for j in wide), 99)


def per_user(jobs, min_jobs: int = 10) -> dict[str, float]:
    """Avg JCT per user with at least `min_jobs` jobs."""
    by: dict[str, list[float]] = {}
    for j in jobs:
        by.setdefault(j.user, []).append(j.finish - j.submit)
    return {u: sum(v) / len(v) for u, v in by.items() if len(v) >= min_jobs}


def one(args: tuple) -> tuple[tuple, dict]:
    seed, n, load, label, overrides, placement, flood, frag, model, min_jobs, sim_set = args
    cfg, cl = runs(json.loads(overrides), placement, json.loads(sim_set))[label]
    if model == "flat":  # the earlier generator: independent jobs, no kinds or limits
        trace = fill_time_limits(synth_jobs(n, 64, load=load, seed=seed), seed)
    else:
        trace = synth_user_jobs(n, 64, load=load, seed=seed)
    trace = with_flooder(trace, flood, seed=seed)
    sim = (Measured if frag else Simulator)(trace, cfg, replace(cl, seed=seed))
    jobs = sim.run()
    done = [j for j in jobs if j.finish is not None]
    span = max(j.finish for j in done) - min(j.submit for j in done)
    out = {
        "avg": sum(j.finish - j.submit for j in done) / len(done),
        "wide": wide_p99(done),
        "users": per_user(done, min_jobs),
        "unfinished": len(jobs) - len(done),
        "max_pre": max((j.preemptions for j in jobs), default=0),
        "over50": sum(j.preemptions > 50 for j in jobs),
        "wait48": {g: avg_wait([j for j in done if j.gpus == g]) for g in (4, 8)},
        "others": avg_jct([j for j in done if j.user != FLOOD_USER]),
        "flood": avg_jct([j for j in done if j.user == FLOOD_USER]),
    }
    if frag:  # shares of the cluster's GPU-time over the run
        out["frag"] = sim.frag_gpu_s / (64 * span)
        out["idle"] = sim.idle_gpu_s / (64 * span)
    return args, out


def avg_jct(jobs) -> float:
    return sum(j.finish - j.submit for j in jobs) / max(1, len(jobs))


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
    ap.add_argument(
        "--sim-set",
        default="{}",
        help="SimConfig overrides (JSON) for every run, Slurm alone's too",
    )
    ap.add_argument("--only", default="", help="comma list of runs (default all)")
    ap.add_argument("--placement", default="consolidate", help="consolidate|spread|profile")
    ap.add_argument("--flood", type=int, default=0, help="jobs of a flooding user (0: none)")
    ap.add_argument("--frag", action="store_true", help="measure fragmentation (slower)")
    ap.add_argument("--model", default="users", help="trace model: users (default) | flat")
    ap.add_argument("--min-jobs", type=int, default=10, help="users counted per-user")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    labels = [x for x in runs({}) if x != "fs2"]
    if args.only:
        labels = ["slurm", "fs"] + [x for x in args.only.split(",") if x not in ("slurm", "fs")]
    ss = seeds(args.seeds)
    key = (args.set, args.placement, args.flood, args.frag, args.model, args.min_jobs, args.sim_set)
    tasks = [(s, args.jobs, args.load, lab, *key) for s in ss for lab in labels]
    with Pool(args.workers) as pool:
        res = dict(pool.map(one, tasks))
    print(
        f"# {args.model} model, {args.jobs} jobs (+{args.flood} flooding), 64 GPUs, load {args.load}, slurm "
        f"model, placement {args.placement}, overrides {args.set}, cluster {args.sim_set}; "
        "avg JCT vs Slurm alone "
        "(fifo), user_* vs Slurm alone with fair-share (fs)"
    )
    cols = [x for x in labels if x != "slurm"]
    head = " ".join(f"{c:>6s}" for c in cols)
    print(f"seed  slurm_h {head}  extra")
    sums: dict[str, list[float]] = {}
    slurm_h: list[float] = []
    for s in ss:
        get = {lab: res[(s, args.jobs, args.load, lab, *key)] for lab in labels}
        base = get["slurm"]
        slurm_h.append(base["avg"] / 3600)
        r = {c: get[c]["avg"] / base["avg"] for c in cols}
        extra = {}
        if "all" in r and "srtf" in r:
            extra["all/srtf"] = get["all"]["avg"] / get["srtf"]["avg"]
        for c in ("fs", "np", "half", "all"):
            if c in get:
                extra[f"wide_{c}"] = get[c]["wide"] / base["wide"]
        bu = get["fs"]["users"]
        for c in ("slurm", "fs2", "np", "half", "all"):
            if c in get:
                # every run holds the same jobs, all finished (checked below)
                rs = sorted(v / bu[u] for u, v in get[c]["users"].items() if u in bu)
                extra[f"med_{c}"] = percentile(rs, 50)  # the median user's ratio
                extra[f"p90_{c}"] = percentile(rs, 90)
                extra[f"user_{c}"] = rs[-1]  # the worst user's ratio
                extra[f"over_{c}"] = sum(x > 1.2 for x in rs) / len(rs)  # share above 1.2x
        extra["users"] = float(len(bu))
        lost = sum(g["unfinished"] for g in get.values())
        if lost:
            extra["unfinished"] = float(lost)
        if args.flood:
            for c in ("slurm", "np"):
                if c in get:
                    extra[f"others_{c}"] = get[c]["others"] / get["fs"]["others"]
                    extra[f"flood_{c}"] = get[c]["flood"] / get["fs"]["flood"]
        if args.frag:
            for c in ("slurm", "fs", "np"):
                if c in get:
                    for g in (4, 8):  # mean wait (h) to first start of 4- and 8-GPU jobs
                        extra[f"wait{g}_{c}_h"] = get[c]["wait48"][g]
                    extra[f"frag%_{c}"] = 100 * get[c]["frag"]
                    extra[f"idle%_{c}"] = 100 * get[c]["idle"]
        if "all" in get:
            extra["max_pre"] = float(get["all"]["max_pre"])
            extra["over50"] = float(get["all"]["over50"])  # jobs requeued more than 50 times
        for k, v in list(r.items()) + list(extra.items()):
            sums.setdefault(k, []).append(v)
        cells = " ".join(f"{r[c]:6.3f}" for c in cols)
        more = " ".join(f"{k}={v:.2f}" for k, v in extra.items())
        print(f"{s:4d} {base['avg'] / 3600:8.2f} {cells}  {more}")
    print(f"slurm alone avg JCT mean {sum(slurm_h) / len(slurm_h):.3f} h")
    print(
        "mean/worst: "
        + ", ".join(f"{k} {sum(v) / len(v):.3f}/{max(v):.3f}" for k, v in sums.items())
    )
    above = [f"{c} {sum(x > 1.0 for x in sums[c])}/{len(ss)}" for c in cols if c in sums]
    print("seeds above 1.0x Slurm alone: " + ", ".join(above))


if __name__ == "__main__":
    main()
