"""The replay's summary, in trace seconds, with `simulate --json`'s keys.

JCT runs from Slurm's submit time to the end of the job's last run; queueing is JCT
minus the time it held its GPUs (as the simulator counts it: a requeued job's lost work
is execution, its waits after a requeue are queueing).
"""

from __future__ import annotations

from collections.abc import Iterable

from slurm_ext.replay.records import JobRecord
from slurm_ext.sim.metrics import jct_figures

KEYS = (
    "jobs", "avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s",
    "makespan_s", "gpu_utilization", "preemptions", "requeues", "timeouts",
)  # fmt: skip


def summarize(records: Iterable[JobRecord], total_gpus: int, speedup: float) -> dict[str, float]:
    """Finished jobs only (completed or killed at their limit; cancelled ones are not)."""
    done = [r for r in records if r.end is not None and r.state in ("COMPLETED", "TIMEOUT")]
    jct = sorted((r.end - r.submit) * speedup for r in done)  # type: ignore[operator]
    held = [sum(e - s for s, e in r.runs) * speedup for r in done]
    first = min((r.submit for r in done), default=0.0)
    last = max((r.end for r in done), default=0.0)  # type: ignore[type-var]
    gpu_s = sum(h * r.gpus for h, r in zip(held, done, strict=True))
    return {
        **jct_figures(jct, sum(jct) - sum(held), (last - first) * speedup, gpu_s, total_gpus),
        "preemptions": sum(r.requeues for r in done),
        "requeues": sum(1 for r in done if r.requeues),
        "timeouts": sum(1 for r in done if r.state == "TIMEOUT"),
    }


def add_ratios(rows: dict[str, dict[str, float]]) -> None:
    """`vs_slurm`: each mode's avg JCT over the `slurm` mode's, when that ran."""
    base = rows.get("slurm", {}).get("avg_jct_s", 0.0)
    if base > 0:
        for row in rows.values():
            row["vs_slurm"] = row["avg_jct_s"] / base
