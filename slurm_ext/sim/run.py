"""One call from a trace and configs to metrics; what the CLI and the benchmarks use."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, SimJob, Simulator
from slurm_ext.sim.metrics import summarize
from slurm_ext.sim.traces import TraceJob


def simulate(
    trace: Sequence[TraceJob],
    policy: PolicyConfig,
    cluster: SimConfig,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[dict[str, float], list[SimJob]]:
    t0 = time.perf_counter()
    sim = Simulator(trace, policy, cluster, progress=progress)
    jobs = sim.run()
    out = summarize(jobs, sim.total_gpus, sim.preemptions)
    out["policy"] = policy.policy  # type: ignore[assignment]
    out["runtime_s"] = time.perf_counter() - t0
    return out, jobs


def compare(
    trace: Sequence[TraceJob],
    policies: Sequence[str],
    base: PolicyConfig,
    cluster: SimConfig,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[dict[str, float]]:
    """Run each policy; add ratios of avg JCT to FIFO's and to SRTF's when those ran."""
    rows = [simulate(trace, replace(base, policy=p), cluster, progress)[0] for p in policies]
    by = {r["policy"]: r for r in rows}
    for r in rows:
        for ref in ("fifo", "srtf"):
            if ref in by and by[ref]["avg_jct_s"] > 0:
                r[f"vs_{ref}"] = r["avg_jct_s"] / by[ref]["avg_jct_s"]
    return rows
