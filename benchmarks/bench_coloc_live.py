"""Co-location live against the simulator: does the replay order the modes as simulated?

    .venv/bin/python -m benchmarks.bench_coloc_live [--jobs 30] [--seed 1] [--wall 150]

One Philly-like trace (`sim.synth`, 2 nodes x 4 GPUs, load 1.0), 30 % of the 1-GPU jobs
opportunistic (a seeded draw; wider jobs stay guaranteed, so in both the simulator and
the replay every opportunistic job runs on shards only), 2 jobs per GPU. Run three ways:
- simulated (`sim.coloc_run.run_pair`: Slurm alone and shared, the agent's `decide()`);
- live Slurm alone (`replay_coloc(..., "alone")`: every job on whole GPUs);
- live shared (`replay_coloc(..., "shared")`: opportunistic jobs on gres/shard in
  partition `opp`, a real node agent per node freezing them).
Both live modes run on the same cluster shape with the same agents, GPU model, job
profiles (the simulator's draw) and time limits (the live ones, whole wall minutes,
given to the simulator too). Printed: per class avg JCT (trace seconds) and the shared
over alone ratio, simulated and live, whether the order agrees, pauses, timeouts.
Needs root (cgroup v1 freezer) and Debian's Slurm; about 2 x (wall + 30 s).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from nodeagent.replay import ReplayAgents
from slurm_ext.policy import PolicyConfig
from slurm_ext.policy import colocation as co
from slurm_ext.replay.plan import auto_speedup, plan
from slurm_ext.replay.sharing import SharedCluster, replay_coloc, sim_trace
from slurm_ext.sim.coloc import ShareConfig
from slurm_ext.sim.coloc_model import profile_of
from slurm_ext.sim.coloc_run import mark_opportunistic, run_pair
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.synth import synth_jobs

NODES, GPUS = 2, 4


def trace(n: int, seed: int, fraction: float) -> list:
    jobs = [j for j in synth_jobs(n, NODES * GPUS, 1.0, seed) if j.gpus <= NODES * GPUS]
    marked = mark_opportunistic(jobs, fraction, seed)
    return [replace(j, opportunistic=j.opportunistic and j.gpus == 1) for j in marked]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--wall", type=float, default=150.0, help="target wall seconds per mode")
    ap.add_argument("--workdir", default="")
    a = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    jobs = trace(a.jobs, a.seed, a.fraction)
    speedup = auto_speedup(jobs, NODES * GPUS, a.wall)
    share = ShareConfig(shards_per_gpu=2, seed=a.seed, whole_gpus=False, agent=co.Policy())
    profiles = {j.job_id: profile_of(j, share) for j in jobs}
    planned = plan(jobs, speedup, NODES, GPUS, "slurm", 0.0, a.seed)
    cluster = SimConfig(nodes=NODES, gpus_per_node=GPUS, preemptive=False)
    sim = run_pair(
        sim_trace(planned, speedup), PolicyConfig(policy="fifo"), cluster, share, profiles
    )
    root = Path(a.workdir or tempfile.mkdtemp(prefix="coloc-live-"))
    live = {}
    for mode in ("alone", "shared"):
        t0 = time.monotonic()
        shape = SharedCluster(NODES, GPUS)
        live[mode] = replay_coloc(
            jobs, mode, root / mode, speedup, shape, profiles, ReplayAgents(), seed=a.seed
        )
        live[mode]["wall_s"] = time.monotonic() - t0
    n_opp = sum(j.opportunistic for j in jobs)
    print(f"trace: {len(jobs)} jobs ({n_opp} opportunistic), seed {a.seed}, speedup {speedup:.0f}")
    print(
        "| class | sim alone | sim shared | sim ratio | live alone | live shared | live ratio | order agrees |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for klass in ("guaranteed", "opportunistic"):
        k = f"{klass}_avg_jct_s"
        sa, ss = sim["slurm_alone"][k], sim["shared"][k]
        la, ls = live["alone"][k], live["shared"][k]
        if not (sa and la):  # a short trace may draw no job of the class
            print(f"| {klass} | no jobs | | | | | | |")
            continue
        agree = (ss < sa) == (ls < la)
        print(
            f"| {klass} | {sa:.0f} | {ss:.0f} | {ss / sa:.3f} | {la:.0f} | {ls:.0f} "
            f"| {ls / la:.3f} | {'yes' if agree else 'no'} |"
        )
    s = sim["shared"]
    print(
        f"sim shared: {s['opportunistic_started_on_shards']} on shards, "
        f"{s['pauses_per_opportunistic_job']:.2f} pauses/opp job, timeouts "
        f"{sim['slurm_alone']['timeouts']} / {s['timeouts']}"
    )
    for mode, row in live.items():
        print(
            f"live {mode}: "
            + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
        )


if __name__ == "__main__":
    main()
