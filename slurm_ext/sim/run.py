"""One call from a trace and configs to metrics; what the CLI and the benchmarks use."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, SimJob, Simulator
from slurm_ext.sim.metrics import summarize
from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob

# the yardstick: Slurm alone (its own priority order, sched/backfill, no requeues)
SLURM_ALONE = "slurm-alone"


def with_limits(trace: Sequence[TraceJob], cluster: SimConfig) -> Sequence[TraceJob]:
    """The trace with a time limit for every job that has none (`fill_time_limits`,
    seeded by `cluster.seed`) when the Slurm model runs it: its backfill plans with them."""
    if cluster.scheduler != "slurm" or all(j.time_limit_s is not None for j in trace):
        return trace
    return fill_time_limits(trace, cluster.seed)


def simulate(
    trace: Sequence[TraceJob],
    policy: PolicyConfig,
    cluster: SimConfig,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[dict[str, float], list[SimJob]]:
    t0 = time.perf_counter()
    sim = Simulator(with_limits(trace, cluster), policy, cluster, progress=progress)
    jobs = sim.run()
    out = summarize(jobs, sim.total_gpus, sim.preemptions, sim.timeouts, sim.lost_work_gpu_s)
    out["policy"] = policy.policy  # type: ignore[assignment]
    out["runtime_s"] = time.perf_counter() - t0
    return out, jobs


def slurm_alone(cluster: SimConfig) -> SimConfig:
    """The cluster setting of the Slurm-alone yardstick: FIFO order (Slurm's own
    age priority), Slurm's scheduler with backfill, no preemption."""
    return replace(cluster, scheduler="slurm", preemptive=False)


def compare(
    trace: Sequence[TraceJob],
    policies: Sequence[str],
    base: PolicyConfig,
    cluster: SimConfig,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[list[dict[str, float]], dict[str, list[SimJob]]]:
    """Slurm alone first (row `slurm-alone`), then each policy on `cluster`.

    Every row gets `vs_slurm` (its avg JCT over Slurm alone's), and `vs_fifo` /
    `vs_srtf` when those policies are among the rows. Returns the rows and each row's jobs.
    """
    alone, jobs = simulate(trace, replace(base, policy="fifo"), slurm_alone(cluster), progress)
    alone["policy"] = SLURM_ALONE  # type: ignore[assignment]
    rows, runs = [alone], {SLURM_ALONE: jobs}
    for p in policies:
        row, jobs = simulate(trace, replace(base, policy=p), cluster, progress)
        rows.append(row)
        runs[p] = jobs
    add_ratios(rows)
    return rows, runs


def add_ratios(rows: list[dict[str, float]]) -> None:
    """vs_slurm, vs_fifo, vs_srtf: each row's avg JCT over that reference row's."""
    by = {r["policy"]: r for r in rows}
    for r in rows:
        for ref, name in ((SLURM_ALONE, "vs_slurm"), ("fifo", "vs_fifo"), ("srtf", "vs_srtf")):
            if ref in by and by[ref]["avg_jct_s"] > 0:
                r[name] = r["avg_jct_s"] / by[ref]["avg_jct_s"]
