"""Predicted CPU cores per GPU vs an even split, on a small CPU-sensitive cluster model.

Self-contained model (slurm_ext.sim schedules GPUs only, it has no CPU dimension):
- cluster: --nodes nodes, each 4 V100-like GPUs and 40 CPU cores (10 cores/GPU evenly);
- workloads with SAD-like saturating curves, GPU speed = min(1, cores_per_gpu / knee):
  resnet50 knee 7, vgg16 knee 12, overfeat knee 40 cores/GPU (SAD, SoCC'18, on V100);
- jobs: Poisson arrivals, 1 or 2 GPUs, work lognormal (mean ~1 GPU-hour at full speed);
  FIFO with first-fit backfill; a job needs its GPUs and GPUs x cores_per_gpu cores on
  one node, runs at the speed its cores give it, and holds both until done.
- even: every job gets 10 cores/GPU. predicted: node agents' samples (the true curves
  plus noise, at random core counts) go through the real predictor (decide_cpus) and the
  real rewrite rule (plan_rewrite, capped by the node's 40 cores).

    .venv/bin/python benchmarks/bench_predictor.py [--nodes 8] [--jobs 2000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from dataclasses import dataclass

from slurm_ext.predict.cpu import CpuPredictorConfig, decide_cpus
from slurm_ext.predict.rewrite import HookConfig, JobRequest, plan_rewrite
from slurm_ext.predict.samples import CpuSample
from slurm_ext.predict.table import decisions_to_rows, parse_table, render_table

GPUS_PER_NODE, CORES_PER_NODE = 4, 40
KNEES = {"resnet50": 7.0, "vgg16": 12.0, "overfeat": 40.0}
MIX = {"resnet50": 0.6, "vgg16": 0.2, "overfeat": 0.2}


def speed(model: str, cores_per_gpu: float) -> float:
    return min(1.0, cores_per_gpu / KNEES[model])


@dataclass
class SimJob:
    job_id: int
    model: str
    gpus: int
    work: float  # seconds at full speed
    arrival: float


def make_jobs(n: int, rate_per_h: float, rng: random.Random) -> list[SimJob]:
    jobs, t = [], 0.0
    models, weights = list(MIX), list(MIX.values())
    for i in range(n):
        t += rng.expovariate(rate_per_h / 3600)
        gpus = 1 if rng.random() < 0.7 else 2
        work = rng.lognormvariate(0, 0.8) * 3600 / 1.377  # mean ~1 h
        jobs.append(SimJob(i, rng.choices(models, weights)[0], gpus, work, t))
    return jobs


def agent_samples(rng: random.Random) -> list[CpuSample]:
    """What node agents would report: mean GPU util at the cores/GPU jobs happened to get."""
    out = []
    for model in KNEES:
        for _ in range(12):
            c = rng.choice([2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40])
            util = max(0.0, min(1.0, 0.92 * speed(model, c) + rng.gauss(0, 0.02)))
            out.append(CpuSample(model, "v100", float(c), util))
    return out


def predicted_cores(samples: list[CpuSample]) -> dict[tuple[str, int], int]:
    """Cores/GPU per (model, GPUs) via the table text and the hook's rewrite rule."""
    decisions = decide_cpus(samples, CpuPredictorConfig(max_cpus_per_gpu=64))
    table = parse_table(render_table(decisions_to_rows(decisions)))
    out = {}
    for model in KNEES:
        for g in (1, 2):
            job = JobRequest(
                comment=f"model={model}",
                tres_per_node=f"gres:gpu:v100:{g}",
                max_cpus_per_node=CORES_PER_NODE,
            )
            rw = plan_rewrite(job, table, HookConfig())
            out[(model, g)] = int(rw.changes["cpus_per_tres"].rsplit(":", 1)[1])
    return out


def simulate(jobs: list[SimJob], nodes: int, cores: dict[tuple[str, int], int]) -> dict[str, float]:
    free_g = [GPUS_PER_NODE] * nodes
    free_c = [CORES_PER_NODE] * nodes
    queue: list[SimJob] = []
    running: list[tuple[float, int, int, int, int]] = []  # (end, job_id, node, gpus, cores)
    arrivals = sorted(jobs, key=lambda j: j.arrival)
    jct, busy_gpu_s, useful_gpu_s = [], 0.0, 0.0
    now, ai = 0.0, 0
    by_id = {j.job_id: j for j in jobs}
    while ai < len(arrivals) or queue or running:
        next_arrival = arrivals[ai].arrival if ai < len(arrivals) else float("inf")
        next_end = running[0][0] if running else float("inf")
        if next_end <= next_arrival:
            now, job_id, node, g, c = heapq.heappop(running)
            free_g[node] += g
            free_c[node] += c
            jct.append(now - by_id[job_id].arrival)
        else:
            now = next_arrival
            queue.append(arrivals[ai])
            ai += 1
        still = []
        for job in queue:  # FIFO with first-fit backfill
            need_c = job.gpus * cores[(job.model, job.gpus)]
            node = next(
                (n for n in range(nodes) if free_g[n] >= job.gpus and free_c[n] >= need_c), None
            )
            if node is None:
                still.append(job)
                continue
            s = speed(job.model, need_c / job.gpus)
            duration = job.work / s
            free_g[node] -= job.gpus
            free_c[node] -= need_c
            busy_gpu_s += job.gpus * duration
            useful_gpu_s += job.gpus * job.work
            heapq.heappush(running, (now + duration, job.job_id, node, job.gpus, need_c))
        queue = still
    makespan = now
    return {
        "throughput_jobs_per_h": len(jobs) / (makespan / 3600),
        "avg_jct_h": statistics.mean(jct) / 3600,
        "gpu_efficiency": useful_gpu_s / busy_gpu_s,  # work done per GPU-second held
        "makespan_h": makespan / 3600,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--load", type=float, default=0.9, help="arrival rate vs even-split capacity")
    args = ap.parse_args()

    even = {(m, g): CORES_PER_NODE // GPUS_PER_NODE for m in KNEES for g in (1, 2)}
    # arrival rate: `load` x what the even split can serve: GPU-hours per job = GPUs / speed
    gpu_h_per_job = 1.3 * sum(MIX[m] / speed(m, even[(m, 1)]) for m in KNEES)
    capacity_per_h = args.nodes * GPUS_PER_NODE / gpu_h_per_job
    rate = args.load * capacity_per_h
    print(f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs x {CORES_PER_NODE} cores; mix {MIX}; "
          f"{args.jobs} jobs/seed at {rate:.1f} jobs/h (load {args.load} of even-split capacity)")  # fmt: skip
    rows: dict[str, list[dict[str, float]]] = {"even split": [], "predicted": []}
    for seed in range(args.seeds):
        rng = random.Random(seed)
        cores = predicted_cores(agent_samples(rng))
        if seed == 0:
            print("predicted cores/GPU (1-GPU, 2-GPU jobs):",
                  {m: (cores[(m, 1)], cores[(m, 2)]) for m in KNEES})  # fmt: skip
        jobs = make_jobs(args.jobs, rate, rng)
        rows["even split"].append(simulate(jobs, args.nodes, even))
        rows["predicted"].append(simulate(jobs, args.nodes, cores))
    keys = ["throughput_jobs_per_h", "avg_jct_h", "gpu_efficiency", "makespan_h"]
    print(f"{'policy':12} " + " ".join(f"{k:>22}" for k in keys))
    means = {}
    for label, rs in rows.items():
        means[label] = {k: statistics.mean(r[k] for r in rs) for k in keys}
        print(f"{label:12} " + " ".join(f"{means[label][k]:22.3f}" for k in keys))
    e, p = means["even split"], means["predicted"]
    print(
        f"predicted vs even: throughput {100 * (p['throughput_jobs_per_h'] / e['throughput_jobs_per_h'] - 1):+.1f}%, "
        f"avg JCT {100 * (p['avg_jct_h'] / e['avg_jct_h'] - 1):+.1f}% (mean of {args.seeds} seeds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
