"""Summary figures of one simulation run."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_ext.sim.simjob import SimJob


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    if not sorted_values:
        return 0.0
    i = max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1)
    return sorted_values[i]


def jct_figures(
    jct: Sequence[float], queued_s: float, makespan: float, gpu_s: float, total_gpus: int
) -> dict[str, float]:
    """The JCT, queue, makespan and utilisation keys shared by `simulate --json` and the
    live replay: `jct` sorted, `queued_s` summed over the jobs, `gpu_s` the GPU-seconds
    they held."""
    n = len(jct)
    return {
        "jobs": n,
        "avg_jct_s": sum(jct) / n if n else 0.0,
        "median_jct_s": percentile(jct, 50),
        "p95_jct_s": percentile(jct, 95),
        "p99_jct_s": percentile(jct, 99),
        "avg_queue_s": queued_s / n if n else 0.0,
        "makespan_s": makespan,
        "gpu_utilization": gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0,
    }


def summarize(
    jobs: Sequence[SimJob],
    total_gpus: int,
    preemptions: int,
    timeouts: int = 0,
    lost_work_gpu_s: float = 0.0,
) -> dict[str, float]:
    """The figures `simulate --json` prints. A job killed at its time limit counts as
    finished there (as in Slurm's accounting); `timeouts` counts them.
    `requeues` equals `preemptions` (a preempted job is requeued)."""
    done = [j for j in jobs if j.finish is not None]
    jct = sorted(j.finish - j.submit for j in done)  # type: ignore[operator]
    first = min((j.submit for j in done), default=0.0)
    last = max((j.finish for j in done), default=0.0)  # type: ignore[type-var]
    queued = sum(j.finish - j.submit - j.executed for j in done)  # type: ignore[operator]
    return {
        **jct_figures(jct, queued, last - first, sum(j.attained for j in done), total_gpus),
        "preemptions": preemptions,
        "requeues": preemptions,
        "timeouts": timeouts,
        "lost_work_gpu_s": lost_work_gpu_s,
    }
