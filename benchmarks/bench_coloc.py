"""Co-location against Slurm alone: the co-location targets on seeded Philly-like traces.

    .venv/bin/python -m benchmarks.bench_coloc                       # seeds 1-3, load 1.3
    .venv/bin/python -m benchmarks.bench_coloc --seeds 4,5,6 --loads 1.0,1.3 --eaco
    # the kept requeue bound and churn rule (docs/benchmarks.md, co-location):
    .venv/bin/python -m benchmarks.bench_coloc --learnt-placement --eaco
        --slow-fraction 0.9 --max-pause 120 --after-requeue not_beside   (one line)

Each row: one trace (2,000 jobs unless --jobs, 64 GPUs = 8 nodes x 8, 30% of jobs opportunistic by a
seeded draw, time limits from `sim.timelimits` where the trace has none), run once as
Slurm alone (FIFO, Slurm's main scheduler + sched/backfill model, no preemption, every
job on whole GPUs) and once with sharing on the same scheduler (`simulate --share`).
Printed: the shared/alone ratios of the targets, both energy accountings (idle GPUs at
idle power; held GPUs only), both utilisations (busy over all GPUs; busy over held
GPUs), the guaranteed jobs' stretch (wall time over time at full speed), jobs killed at
their time limit (alone / shared), pauses per opportunistic job and the wall time of
each run.
"""

from __future__ import annotations

import argparse

from slurm_ext.policy import AFTER_REQUEUE, PolicyConfig
from slurm_ext.policy import colocation as co
from slurm_ext.sim.coloc import ShareConfig
from slurm_ext.sim.coloc_run import mark_opportunistic, run_pair
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.synth import synth_jobs

HEAD = (
    "| load | seed | kWh/GPU-h | held kWh/GPU-h | GPU util | held util | guar. avg JCT "
    "| opp. avg JCT | guar. p99 JCT | guar. stretch p99 / max | guar. > 1.10x "
    "| timeouts alone / shared (opp.) | pauses/opp job | opp. requeues | s alone / shared |"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--loads", default="1.3")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--slow-fraction", type=float, default=0.7)
    ap.add_argument("--eaco", action="store_true")
    ap.add_argument("--learnt-placement", action="store_true")
    ap.add_argument("--max-shard-gpus", type=int, default=1)
    ap.add_argument("--max-pause", type=float, default=0.0, help="requeue after (trace s)")
    ap.add_argument("--ends-before", action="store_true")
    ap.add_argument(
        "--after-requeue",
        default="any",
        choices=AFTER_REQUEUE,
        help="what a requeued job avoids (policy.opportunistic.shard_offered)",
    )
    ap.add_argument("--checkpoint", type=float, default=0.0, help="checkpoint interval (s)")
    a = ap.parse_args()
    cluster = SimConfig(
        nodes=8, gpus_per_node=8, preemptive=False, checkpoint_interval_s=a.checkpoint
    )
    policy = PolicyConfig(policy="fifo")
    agent = co.Policy(slow_fraction=a.slow_fraction, eaco=co.EacoModel() if a.eaco else None)
    print(HEAD)
    print("|" + " --- |" * (HEAD.count("|") - 1))
    for load in (float(x) for x in a.loads.split(",")):
        for seed in (int(x) for x in a.seeds.split(",")):
            trace = mark_opportunistic(synth_jobs(a.jobs, 64, load, seed), a.fraction, seed)
            share = ShareConfig(
                shards_per_gpu=a.shards,
                seed=seed,
                agent=agent,
                learnt_placement=a.learnt_placement,
                max_shard_gpus=a.max_shard_gpus,
                max_pause_s=a.max_pause,
                ends_before=a.ends_before,
                after_requeue=a.after_requeue,
            )
            out = run_pair(trace, policy, cluster, share)
            r, s = out["shared_vs_alone"], out["shared"]
            alone = out["slurm_alone"]
            print(
                f"| {load} | {seed} | {r['kwh_per_gpu_hour_of_work']:.3f} "
                f"| {r['held_kwh_per_gpu_hour_of_work']:.3f} "
                f"| {r['gpu_utilization']:.3f} | {r['held_gpu_utilization']:.3f} "
                f"| {r['guaranteed_avg_jct_s']:.3f} "
                f"| {r['opportunistic_avg_jct_s']:.3f} | {r['guaranteed_p99_jct_s']:.3f} "
                f"| {s['guaranteed_stretch_p99']:.3f} / {s['guaranteed_stretch_max']:.3f} "
                f"| {s['guaranteed_over_1_10']} | {alone['timeouts']} / {s['timeouts']} "
                f"({s['opportunistic_timeouts']}) "
                f"| {s['pauses_per_opportunistic_job']:.2f} | {s['opportunistic_requeues']} "
                f"| {alone['runtime_s']:.1f} / {s['runtime_s']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
