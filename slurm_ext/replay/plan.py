"""From a trace to what the replay submits: scaled times, limits, sbatch arguments.

Pure functions of the trace and the settings, so the live replay and the simulator agree
on every job's limit and opt-in, and tests can check the scaling without Slurm. Times in
a trace are "trace seconds"; a replay at speedup X runs each trace second in 1/X wall
seconds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ext.sim.timelimits import fill_time_limits
from slurm_ext.sim.traces import TraceJob

MODES = ("slurm", "service", "service-requeue")
TARGET_WALL_S = 420.0  # auto speedup: the estimated makespan fits in 7 minutes of wall time
MIN_WALL_JOB_S = 1.0  # below this Slurm's own start/stop latency dominates a job


class PlanError(ValueError):
    """The trace cannot be replayed on this cluster (the message names the job)."""


@dataclass(frozen=True)
class ReplayJob:
    """One trace job as the replay submits it (wall seconds unless named _trace_)."""

    trace: TraceJob
    submit_wall_s: float  # offset from the replay's start
    work_wall_s: float
    limit_min: int  # Slurm's --time, whole minutes (its granularity)
    preemptible: bool
    nodes: int
    gpus_per_node: int  # 0: ask --gpus=N over `nodes` nodes (uneven split)

    @property
    def name(self) -> str:
        """Unique per job: its checkpoint and output files."""
        return f"replay-{self.trace.job_id}"

    @property
    def kind_name(self) -> str:
        """Its Slurm job name. Live every job runs as the replaying user, so a trace's
        recurring kinds (user + job name) keep apart only as `user.job_name`; the
        conditioned Gittins index groups history by it. Jobs without a name stay unique."""
        if self.trace.job_name:
            return (
                f"{self.trace.user}.{self.trace.job_name}"
                if self.trace.user
                else self.trace.job_name
            )
        return self.name


def estimate_makespan_s(jobs: Sequence[TraceJob], total_gpus: int) -> float:
    """A rough trace-time makespan: the later of the last arrival and the GPU work spread
    over the cluster, plus the longest job (the tail that runs after the rest)."""
    if not jobs:
        return 0.0
    work = sum(j.gpus * j.duration_s for j in jobs) / max(1, total_gpus)
    return max(max(j.submit_time for j in jobs), work) + max(j.duration_s for j in jobs)


def auto_speedup(
    jobs: Sequence[TraceJob], total_gpus: int, target_s: float = TARGET_WALL_S
) -> float:
    """The speedup that fits the estimated makespan into `target_s` of wall time (>= 1)."""
    return max(1.0, estimate_makespan_s(jobs, total_gpus) / target_s)


def shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) to ask for; GPUs per node 0 means `--gpus=N -N nodes`."""
    if gpus <= gpus_per_node:
        return 1, gpus
    nodes = math.ceil(gpus / gpus_per_node)
    return (nodes, gpus_per_node) if gpus % gpus_per_node == 0 else (nodes, 0)


def plan(
    jobs: Sequence[TraceJob],
    speedup: float,
    nodes: int,
    gpus_per_node: int,
    mode: str = "slurm",
    preemptible_fraction: float = 0.0,
    seed: int = 0,
) -> list[ReplayJob]:
    """Every job scaled by `speedup`, with a time limit (the trace's, else
    `fill_time_limits(jobs, seed)` as the simulator uses) and its opt-in to requeue:
    the trace's checkpoint flag, or a seeded draw of `preemptible_fraction` (only in
    service-requeue mode). Refuses a job wider than the cluster."""
    if mode not in MODES:
        raise PlanError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not (math.isfinite(speedup) and speedup >= 1.0):
        raise PlanError(f"speedup must be a number >= 1, got {speedup}")
    if not 0.0 <= preemptible_fraction <= 1.0:
        raise PlanError(f"preemptible fraction must be within [0, 1], got {preemptible_fraction}")
    total = nodes * gpus_per_node
    wide = [j for j in jobs if j.gpus > total]
    if wide:
        j = wide[0]
        raise PlanError(
            f"job {j.job_id} asks for {j.gpus} GPUs but the cluster has {total} "
            f"({nodes} nodes x {gpus_per_node}); {len(wide)} such job(s) - use a larger "
            "cluster or drop them from the trace"
        )
    out = []
    for j in fill_time_limits(jobs, seed):
        rng = random.Random(f"{seed}:preempt:{j.job_id}")
        opted = j.checkpoint or rng.random() < preemptible_fraction
        n, per = shape(j.gpus, gpus_per_node)
        limit_s = j.time_limit_s if j.time_limit_s is not None else math.inf
        out.append(
            ReplayJob(
                trace=j,
                submit_wall_s=j.submit_time / speedup,
                work_wall_s=j.duration_s / speedup,
                limit_min=max(1, math.ceil(limit_s / speedup / 60.0 - 1e-9)),
                preemptible=mode == "service-requeue" and opted,
                nodes=n,
                gpus_per_node=per,
            )
        )
    return out


def sbatch_args(job: ReplayJob, partition: str, jobs_dir: str) -> list[str]:
    """The sbatch options for one job (the payload command line goes in --wrap)."""
    args = [
        "--parsable",
        f"--job-name={job.kind_name}",
        f"--partition={partition}",
        f"--time={job.limit_min}",
        f"--chdir={jobs_dir}",
        f"--output={jobs_dir}/{job.name}.out",
        f"-N{job.nodes}",
    ]
    args.append(
        f"--gres=gpu:{job.gpus_per_node}" if job.gpus_per_node else f"--gpus={job.trace.gpus}"
    )
    if job.preemptible:
        args += ["--requeue", "--comment=checkpoint=1"]
    else:
        args.append("--no-requeue")
    return args


def limit_fidelity(jobs: Sequence[ReplayJob], speedup: float) -> float:
    """Mean factor by which rounding limits up to whole wall minutes stretches them."""
    ratios = [
        j.limit_min * 60.0 * speedup / j.trace.time_limit_s
        for j in jobs
        if j.trace.time_limit_s and math.isfinite(j.trace.time_limit_s)
    ]
    return sum(ratios) / len(ratios) if ratios else 1.0
