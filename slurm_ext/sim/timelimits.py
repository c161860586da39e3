"""Time limits for trace jobs that carry none: a seeded model of how users over-estimate.

Slurm's backfill plans with time limits, not run times, so a faithful simulation (and a
live replay of the same trace) needs a limit for every job. Traces from sacct carry the
user's `Timelimit`; Tiresias- and PAI-style traces do not. For those, each job gets the
limit a user would plausibly have typed, from what studies of real logs found:

- Estimates are modal: a handful of round values (1 h, 4 h, 1 day, the partition maximum)
  cover most jobs, and the maximum is the single most popular choice (Tsafrir, Etsion and
  Feitelson, "Modeling user runtime estimates", JSSPP 2005; Mu'alem and Feitelson, IEEE
  TPDS 2001, on the same logs: most jobs use a small fraction of their estimate).
- Over-estimates are large and spread over orders of magnitude: the factor (limit / run
  time) is drawn log-uniform between 1x and `max_factor` (100x by default, so the median
  job asks for 10x what it uses; DL clusters report median over-estimates of 10-66x).

A job never gets a limit below its run time: the trace's duration is what it ran, so a
job that hit its limit in the real log already has duration == limit there. Each job's
draw depends only on (seed, job id), so a replay of a subset of a trace and the
simulation of the whole trace give a job the same limit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from slurm_ext.sim.traces import TraceJob

HOUR = 3600.0
# round values users type (seconds): 30 min, 1, 2, 4, 8, 12 h, 1, 2, 3 days
MODAL_LIMITS_S = (
    1800.0,
    HOUR,
    2 * HOUR,
    4 * HOUR,
    8 * HOUR,
    12 * HOUR,
    24 * HOUR,
    48 * HOUR,
    72 * HOUR,
)
PARTITION_MAX_S = 7 * 24 * HOUR  # a common GPU partition MaxTime
P_MAX = 0.25  # share of jobs that simply ask for the partition maximum
MAX_FACTOR = 100.0


def user_time_limit(
    duration_s: float,
    rng: random.Random,
    partition_max_s: float = PARTITION_MAX_S,
    p_max: float = P_MAX,
    max_factor: float = MAX_FACTOR,
) -> float:
    """One job's limit: the partition maximum (p_max), else the smallest round value at or
    above its run time x a log-uniform factor in [1, max_factor], capped at the maximum."""
    cap = max(partition_max_s, duration_s)
    if rng.random() < p_max:
        return cap
    wanted = duration_s * math.exp(rng.uniform(0.0, math.log(max_factor)))
    for limit in MODAL_LIMITS_S:
        if limit >= wanted:
            return min(limit, cap)
    return cap


def fill_time_limits(
    jobs: Sequence[TraceJob],
    seed: int = 0,
    partition_max_s: float = PARTITION_MAX_S,
    p_max: float = P_MAX,
    max_factor: float = MAX_FACTOR,
) -> list[TraceJob]:
    """The jobs, each without a time limit given one from the model (others unchanged)."""
    if not (0.0 <= p_max <= 1.0):
        raise ValueError(f"p_max must be within [0, 1], got {p_max}")
    if not (math.isfinite(max_factor) and max_factor >= 1.0):
        raise ValueError(f"max_factor must be a finite number >= 1, got {max_factor}")
    if not (math.isfinite(partition_max_s) and partition_max_s > 0):
        raise ValueError(f"partition_max_s must be a positive number, got {partition_max_s}")
    out = []
    for j in jobs:
        if j.time_limit_s is None:
            rng = random.Random(f"{seed}:{j.job_id}")
            limit = user_time_limit(j.duration_s, rng, partition_max_s, p_max, max_factor)
            j = replace(j, time_limit_s=limit)
        out.append(j)
    return out
