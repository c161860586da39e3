"""Seeded heavy-tailed Philly-like workloads.

Run times are log-normal, clipped to [1 min, 7 days], tuned so the median is ~25 min and
the mean ~3.5 h; 70% of jobs ask for one GPU, the rest 2-16. Arrivals are Poisson at the
rate that gives the requested offered load (GPU-seconds asked per GPU-second available).
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path
from typing import TextIO

from slurm_ext.sim.traces import TraceJob

GpuMix = tuple[tuple[int, float], ...]  # (GPUs, weight) pairs
GPU_CHOICES: GpuMix = ((1, 0.70), (2, 0.12), (4, 0.09), (8, 0.07), (16, 0.02))
MODELS = ("resnet50", "resnet152", "inception3", "googlenet", "bert", "vgg16", "vgg19", "alexnet")
MEDIAN_S, SIGMA = 1500.0, 2.15
MIN_S, MAX_S = 60.0, 7 * 86400.0


def check_gpu_mix(mix: GpuMix) -> None:
    """A width mix must be non-empty, its GPU counts >= 1 and its weights >= 0, not all 0."""
    if not mix or any(g < 1 or not w >= 0 for g, w in mix) or sum(w for _, w in mix) <= 0:
        raise ValueError(f"gpu_choices must be (GPUs >= 1, weight >= 0) pairs, got {mix!r}")


def synth_jobs(
    n: int, gpus: int, load: float = 1.0, seed: int = 0, gpu_choices: GpuMix = GPU_CHOICES
) -> list[TraceJob]:
    """`n` independent jobs; `gpu_choices` ((GPUs, weight), ...) is the width mix."""
    check_gpu_mix(gpu_choices)
    rng = random.Random(seed)
    durations = [
        min(MAX_S, max(MIN_S, rng.lognormvariate(math.log(MEDIAN_S), SIGMA))) for _ in range(n)
    ]
    sizes = rng.choices([g for g, _ in gpu_choices], [w for _, w in gpu_choices], k=n)
    mean_work = sum(d * g for d, g in zip(durations, sizes, strict=True)) / max(1, n)
    rate = load * gpus / mean_work  # arrivals per second
    t = 0.0
    jobs = []
    for i in range(n):
        jobs.append(
            TraceJob(
                job_id=i,
                gpus=sizes[i],
                submit_time=round(t, 3),
                duration_s=round(durations[i], 3),
                model_tag=rng.choice(MODELS),
                user=f"u{rng.randrange(20)}",
            )
        )
        t += rng.expovariate(rate)
    return jobs


def write_tiresias_csv(jobs: list[TraceJob], out: str | Path | TextIO) -> None:
    """Tiresias' columns plus the optional user, job_name, time_limit (seconds, empty when
    unknown) and checkpoint (0/1) that `traces.read_trace` reads back."""
    if isinstance(out, (str, Path)):
        with Path(out).open("w", newline="") as fh:
            write_tiresias_csv(jobs, fh)
        return
    w = csv.writer(out, lineterminator="\n")
    w.writerow(
        ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"]
        + ["user", "job_name", "time_limit", "checkpoint"]
    )
    for j in jobs:
        w.writerow(
            [j.job_id, j.gpus, j.submit_time, 0, j.model_tag or "", j.duration_s, 0]
            + [j.user, j.job_name, "" if j.time_limit_s is None else j.time_limit_s]
            + [int(j.checkpoint)]
        )
