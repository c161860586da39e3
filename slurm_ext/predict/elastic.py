"""GPU counts for elastic jobs: split the free GPUs to maximise total throughput.

Jayaram et al. 2020: jobs that can run on a range of GPUs differ in how well they scale,
so a dynamic program over (jobs x GPUs) that gives each GPU where it adds most throughput
beats first-come or equal shares. Pure function; the simulator calls `allocate_elastic`
at each scheduling event with the jobs waiting or resizable and the GPUs free then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ElasticJob:
    job_id: int
    min_gpus: int
    max_gpus: int
    throughput: tuple[float, ...]  # throughput[g - 1] at g GPUs, g = 1..max_gpus

    def __post_init__(self) -> None:
        if not 1 <= self.min_gpus <= self.max_gpus:
            raise ValueError(
                f"job {self.job_id}: need 1 <= min_gpus <= max_gpus, got {self.min_gpus}..{self.max_gpus}"
            )
        if len(self.throughput) != self.max_gpus:
            raise ValueError(
                f"job {self.job_id}: throughput needs {self.max_gpus} values (1..max GPUs), got {len(self.throughput)}"
            )
        if any(not math.isfinite(t) or t < 0 for t in self.throughput):
            raise ValueError(f"job {self.job_id}: throughput values must be finite and >= 0")


def amdahl_throughput(
    serial_fraction: float, max_gpus: int, one_gpu: float = 1.0
) -> tuple[float, ...]:
    """A scaling curve with a serial share: throughput(g) = one_gpu / (s + (1 - s) / g)."""
    if not 0.0 <= serial_fraction <= 1.0:
        raise ValueError(f"serial_fraction must be in 0..1, got {serial_fraction}")
    return tuple(
        one_gpu / (serial_fraction + (1 - serial_fraction) / g) for g in range(1, max_gpus + 1)
    )


def allocate_elastic(jobs: Sequence[ElasticJob], free_gpus: int) -> dict[int, int]:
    """GPUs per job (0: not started now) maximising summed throughput with <= free_gpus in all.

    Each job gets 0 or a count in its [min_gpus, max_gpus]. A GPU is given only where it adds
    throughput; on ties the job earlier in `jobs` wins (pass them in queue order).
    O(len(jobs) * free_gpus * max_gpus).
    """
    if free_gpus < 0:
        raise ValueError(f"free_gpus must be >= 0, got {free_gpus}")
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique")
    n = len(jobs)
    # best[i][g]: max throughput of jobs[:i] within g GPUs; choice[i][g]: GPUs to jobs[i - 1].
    # Filled forward and read back from the last job, so on a tie a later job gets nothing
    # and the earlier job keeps its GPUs.
    best = [[0.0] * (free_gpus + 1) for _ in range(n + 1)]
    choice = [[0] * (free_gpus + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        job = jobs[i - 1]
        for g in range(free_gpus + 1):
            value, pick = best[i - 1][g], 0
            for k in range(job.min_gpus, min(job.max_gpus, g) + 1):
                v = job.throughput[k - 1] + best[i - 1][g - k]
                if v > value + 1e-12:
                    value, pick = v, k
            best[i][g], choice[i][g] = value, pick
    alloc: dict[int, int] = {}
    g = free_gpus
    for i in range(n, 0, -1):
        alloc[jobs[i - 1].job_id] = choice[i][g]
        g -= choice[i][g]
    return {j.job_id: alloc[j.job_id] for j in jobs}
