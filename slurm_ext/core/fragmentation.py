"""GPUs idle because of fragmentation: one definition for the simulator and live replays.

While jobs wait, a free GPU is *stranded* when it sits on a node with fewer free GPUs
than W = min(GPUs per node, the widest waiting job's GPUs): it cannot serve the widest
waiting job although it is free. `stranded_gpus` is that count at one instant; the
simulator samples it after each pass (benchmarks/bench_targets.py), and `summarize`
integrates it over a timeline of allocations (a live replay's sacct records), together
with the waits of wide jobs and the average JCT.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Alloc = tuple[tuple[str, int], ...]  # (node, GPUs) per node of one run


def stranded_gpus(free: Iterable[int], widest_waiting: int, gpus_per_node: int) -> int:
    """Free GPUs on nodes with fewer free than min(GPUs per node, widest waiting job's
    GPUs); 0 when nothing waits (widest_waiting <= 0)."""
    if widest_waiting <= 0:
        return 0
    w = min(widest_waiting, gpus_per_node)
    return sum(f for f in free if f < w)


def even_split(gpus: int, nodes: Sequence[str]) -> list[tuple[str, int]]:
    """A job's GPUs spread over its nodes, the remainder on the first ones."""
    if not nodes:
        return []
    share, extra = divmod(gpus, len(nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(nodes)]


@dataclass
class JobRuns:
    """One job as recorded: its width, submit time and every run with its nodes."""

    job_id: int
    gpus: int
    submit: float
    runs: list[tuple[float, float, Alloc]] = field(default_factory=list)  # (start, end, alloc)


def _events(jobs: Iterable[JobRuns]) -> list[tuple[float, int, int, JobRuns, Alloc]]:
    """(time, order, sign, job, alloc): ends (order 0), then submits (1), then starts (2)
    at the same instant; the state after all of them holds until the next time."""
    ev: list[tuple[float, int, int, JobRuns, Alloc]] = []
    for j in jobs:
        ev.append((j.submit, 1, 0, j, ()))
        for s, e, alloc in j.runs:
            ev.append((s, 2, 1, j, alloc))
            ev.append((e, 0, -1, j, alloc))
    ev.sort(key=lambda x: (x[0], x[1], x[3].job_id))
    return ev


def fragmentation_gpu_s(
    jobs: Sequence[JobRuns], nodes: Mapping[str, int], gpus_per_node: int
) -> tuple[float, float]:
    """(stranded GPU-seconds, free GPU-seconds while jobs wait) over the timeline.

    nodes: every node's GPUs (nodes no job ran on count as wholly free). A job waits
    from its submit to its first start and between runs (after a requeue).
    """
    free = dict(nodes)
    waiting: dict[int, int] = {}  # job -> GPUs, while it waits
    runs_left = {j.job_id: len(j.runs) for j in jobs}
    frag = idle = 0.0
    last_t: float | None = None
    last_frag = last_idle = 0
    for t, _, sign, job, alloc in _events(jobs):
        if last_t is not None:
            frag += (t - last_t) * last_frag
            idle += (t - last_t) * last_idle
        last_t = t
        if sign == 0:
            if runs_left[job.job_id]:
                waiting[job.job_id] = job.gpus
        elif sign == 1:
            waiting.pop(job.job_id, None)
            for n, g in alloc:
                free[n] -= g
        else:
            for n, g in alloc:
                free[n] += g
            runs_left[job.job_id] -= 1
            if runs_left[job.job_id]:  # requeued: it waits for its next run
                waiting[job.job_id] = job.gpus
        widest = max(waiting.values(), default=0)
        last_frag = stranded_gpus(free.values(), widest, gpus_per_node)
        last_idle = sum(free.values()) if widest else 0
    return frag, idle


def summarize(
    jobs: Sequence[JobRuns],
    nodes: Mapping[str, int],
    gpus_per_node: int,
    scale: float = 1.0,
    widths: Sequence[int] = (4, 8),
) -> dict[str, float]:
    """Per run: mean wait to first start of jobs of each width in `widths` (seconds x
    scale), stranded and idle-while-waiting GPU time as shares of the cluster's GPU time
    over the span (first submit to last end), and the average JCT (x scale) of the jobs
    that ran (submit to the end of the last run)."""
    ran = [j for j in jobs if j.runs]
    out: dict[str, float] = {}
    for w in widths:
        waits = [(j.runs[0][0] - j.submit) * scale for j in ran if j.gpus == w]
        out[f"wait{w}_s"] = sum(waits) / len(waits) if waits else 0.0
        out[f"jobs{w}"] = float(len(waits))
    frag, idle = fragmentation_gpu_s(ran, nodes, gpus_per_node)
    span = max((j.runs[-1][1] for j in ran), default=0.0) - min(
        (j.submit for j in ran), default=0.0
    )
    capacity = sum(nodes.values()) * span
    out["frag_share"] = frag / capacity if capacity > 0 else 0.0
    out["idle_share"] = idle / capacity if capacity > 0 else 0.0
    out["avg_jct_s"] = (
        sum((j.runs[-1][1] - j.submit) * scale for j in ran) / len(ran) if ran else 0.0
    )
    return out
