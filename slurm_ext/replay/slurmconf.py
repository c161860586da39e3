"""slurm.conf lines for a replay cluster: Slurm's cycles made fast next to scaled jobs.

Slurm's defaults assume jobs that run for hours (a backfill pass every 30 s, plans in
60 s steps, priorities aged over 7 days). At a speedup of X a trace second lasts 1/X of
a wall second, so each default is cut to what a site's default is worth in trace time,
down to the smallest value Slurm accepts. docs/simulator.md ("Live replay") lists them.
"""

from __future__ import annotations

import math

SITE_MAX_AGE_S = 7 * 86400.0  # Slurm's default PriorityMaxAge and PriorityDecayHalfLife
SITE_BF_RESOLUTION_S = 60.0  # Slurm's default bf_resolution


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60.0))


def replay_conf(speedup: float, max_limit_min: int) -> str:
    """Extra slurm.conf for `LocalCluster(extra_conf=...)` at this speedup.

    max_limit_min: the longest wall time limit of the replay, so backfill plans that far.
    """
    bf_resolution = max(1, round(SITE_BF_RESOLUTION_S / speedup))
    params = [
        "sched_interval=1",  # main scheduler every second (default 60)
        "sched_min_interval=100000",  # at most every 0.1 s on events (default 2 us)
        "batch_sched_delay=0",
        "bf_interval=1",  # a backfill pass every second (default 30)
        f"bf_resolution={bf_resolution}",  # default 60 s of plan steps, scaled
        f"bf_window={max(5, max_limit_min + 1)}",  # plan beyond the longest limit
        "bf_continue",
        "bf_max_job_test=500",
        "default_queue_depth=500",
    ]
    return "\n".join(
        [
            "SchedulerParameters=" + ",".join(params),
            f"PriorityMaxAge={_minutes(SITE_MAX_AGE_S / speedup)}",
            f"PriorityDecayHalfLife={_minutes(SITE_MAX_AGE_S / speedup)}",
            "PriorityCalcPeriod=1",
            "SlurmdTimeout=30",
            "MessageTimeout=5",
            "KillWait=1",
            "CompleteWait=0",
            "MinJobAge=3600",  # jobs stay in squeue for the no-accounting fallback
        ]
    )
