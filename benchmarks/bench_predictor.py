"""Predicted CPU cores per GPU vs an even split, replayed on the trace simulator.

Runs on slurm_ext.sim with its CPU dimension on (SimConfig.cpus_per_node):
- cluster: --nodes nodes, each 4 V100-like GPUs and 40 CPU cores (10 cores/GPU evenly),
  consolidated placement (a job's GPUs and cores on one node);
- workloads with SAD-like saturating curves, GPU speed = min(1, cores_per_gpu / knee):
  resnet50 knee 7, vgg16 knee 12, overfeat knee 40 cores/GPU (sim.cpus.DEFAULT_KNEES);
- jobs: Poisson arrivals, 70 % 1 GPU / 30 % 2 GPUs, mix 60/20/20 %, work lognormal
  (mean ~1 GPU-hour at full speed), at --loads x the even split's capacity;
- policies: the engine's fifo (non-preemptive, first-fit backfill) and the shipped
  gittins (preemptive, 30 s restart overhead);
- even: every job asks 10 cores/GPU. predicted: node agents' samples (the true curves
  plus noise, at random core counts) go through the real predictor (decide_cpus) and the
  real rewrite rule (plan_rewrite, capped by the node's 40 cores).

    .venv/bin/python -m benchmarks.bench_predictor [--nodes 8] [--jobs 2000] [--seeds 5]
        [--loads 0.8,1.0,1.2] [--policies fifo,gittins]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from slurm_ext.policy import PolicyConfig
from slurm_ext.predict.cpu import CpuPredictorConfig, decide_cpus
from slurm_ext.predict.rewrite import HookConfig, JobRequest, plan_rewrite
from slurm_ext.predict.samples import CpuSample
from slurm_ext.predict.table import decisions_to_rows, parse_table, render_table
from slurm_ext.sim.cpus import DEFAULT_KNEES, cpu_speed
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.metrics import summarize
from slurm_ext.sim.traces import TraceJob

GPUS_PER_NODE, CORES_PER_NODE = 4, 40
KNEES = DEFAULT_KNEES
MIX = {"resnet50": 0.6, "vgg16": 0.2, "overfeat": 0.2}
Cores = dict[tuple[str, int], int]  # (model, GPUs) -> cores per GPU


def speed(model: str, cores_per_gpu: float) -> float:
    return cpu_speed(model, cores_per_gpu, KNEES)


def make_jobs(n: int, rate_per_h: float, rng: random.Random) -> list[tuple[str, int, float, float]]:
    """(model, GPUs, work s at full speed, submit s), Poisson arrivals at `rate_per_h`."""
    jobs, t = [], 0.0
    models, weights = list(MIX), list(MIX.values())
    for _ in range(n):
        t += rng.expovariate(rate_per_h / 3600)
        gpus = 1 if rng.random() < 0.7 else 2
        work = rng.lognormvariate(0, 0.8) * 3600 / 1.377  # mean ~1 h
        jobs.append((rng.choices(models, weights)[0], gpus, work, t))
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


def predicted_cores(samples: list[CpuSample]) -> Cores:
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


def trace(jobs: list[tuple[str, int, float, float]], cores: Cores) -> list[TraceJob]:
    return [
        TraceJob(i, g, submit, work, model_tag=m, cpus_per_gpu=cores[(m, g)])
        for i, (m, g, work, submit) in enumerate(jobs)
    ]


def run(trace: list[TraceJob], nodes: int, policy: str) -> dict[str, float]:
    cluster = SimConfig(
        nodes=nodes,
        gpus_per_node=GPUS_PER_NODE,
        cpus_per_node=CORES_PER_NODE,
        cpu_knees=dict(KNEES),
        preemptive=policy != "fifo",  # FIFO with backfill never takes GPUs back
        scheduler="greedy",  # as its figures in docs/benchmarks.md were measured
    )
    sim = Simulator(trace, PolicyConfig(policy=policy), cluster)
    jobs = sim.run()
    s = summarize(jobs, sim.total_gpus, sim.preemptions)
    return {
        "jobs_per_h": s["jobs"] / (s["makespan_s"] / 3600),
        "avg_jct_h": s["avg_jct_s"] / 3600,
        # work (GPU-s at full speed) per GPU-second held: 1 = no GPU time lost to starving
        # or to restarts
        "work_per_gpu_h": sum(j.gpus * j.duration for j in jobs) / sum(j.attained for j in jobs),
        "preemptions": float(sim.preemptions),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--loads", default="0.8,1.0,1.2", help="arrival rates vs even-split capacity")
    ap.add_argument("--policies", default="fifo,gittins")
    args = ap.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]

    even = {(m, g): CORES_PER_NODE // GPUS_PER_NODE for m in KNEES for g in (1, 2)}
    # capacity: GPUs / GPU-hours per job under the even split (mean 1.3 GPUs x 1 h / speed)
    gpu_h_per_job = 1.3 * sum(MIX[m] / speed(m, even[(m, 1)]) for m in KNEES)
    capacity_per_h = args.nodes * GPUS_PER_NODE / gpu_h_per_job
    print(f"slurm_ext.sim: {args.nodes} nodes x {GPUS_PER_NODE} GPUs x {CORES_PER_NODE} cores; "
          f"mix {MIX}; {args.jobs} jobs x {args.seeds} seeds per cell; "
          f"even-split capacity {capacity_per_h:.2f} jobs/h")  # fmt: skip
    print("| load | policy | cores | jobs/h (n / makespan) | avg JCT h | "
          "work per GPU-hour held | preemptions |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    t0 = time.perf_counter()
    summary = []
    for load in loads:
        for policy in policies:
            rows: dict[str, list[dict[str, float]]] = {"even split": [], "predicted": []}
            for seed in range(args.seeds):
                rng = random.Random(seed)
                cores = predicted_cores(agent_samples(rng))
                if seed == 0 and load == loads[0] and policy == policies[0]:
                    print("<!-- predicted cores/GPU (1-GPU, 2-GPU), seed 0: "
                          f"{ {m: (cores[(m, 1)], cores[(m, 2)]) for m in KNEES} } -->")  # fmt: skip
                jobs = make_jobs(args.jobs, load * capacity_per_h, rng)
                rows["even split"].append(run(trace(jobs, even), args.nodes, policy))
                rows["predicted"].append(run(trace(jobs, cores), args.nodes, policy))
            means = {
                label: {k: statistics.mean(r[k] for r in rs) for k in rs[0]}
                for label, rs in rows.items()
            }
            for label, m in means.items():
                print(f"| {load} | {policy} | {label} | {m['jobs_per_h']:.2f} | "
                      f"{m['avg_jct_h']:.2f} | {m['work_per_gpu_h']:.2f} | "
                      f"{m['preemptions']:.0f} |", flush=True)  # fmt: skip
            e, p = means["even split"], means["predicted"]
            summary.append(
                f"load {load} {policy}: throughput "
                f"{100 * (p['jobs_per_h'] / e['jobs_per_h'] - 1):+.1f} %, avg JCT "
                f"{100 * (p['avg_jct_h'] / e['avg_jct_h'] - 1):+.1f} %"
            )
    print(f"\npredicted vs even (mean of {args.seeds} seeds):")
    print("\n".join(summary))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
