"""slurm.conf lines for a replay cluster: Slurm's cycles made fast next to scaled jobs.

Slurm's defaults assume jobs that run for hours (a backfill pass every 30 s, plans in
60 s steps, priorities aged over 7 days). At a speedup of X a trace second lasts 1/X of
a wall second, so each default is cut to what a site's default is worth in trace time,
down to the smallest value Slurm accepts. docs/simulator.md ("Live replay") lists them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SITE_MAX_AGE_S = 7 * 86400.0  # Slurm's default PriorityMaxAge and PriorityDecayHalfLife
SITE_BF_RESOLUTION_S = 60.0  # Slurm's default bf_resolution
# Wall seconds Slurm keeps a requeued batch job ineligible: batch_requeue_fini() in
# slurmctld/job_mgr.c sets its begin time to now + cred_expire + 1 (25.11: the
# SchedulerParameters requeue_delay= when set, else cred_expire). The harness sets
# AuthInfo cred_expire=5, the least Slurm accepts (below 5 it falls back to 120), and
# 22.05 has no requeue_delay, so 6 s is the floor here; a site's default is 121 s.
REQUEUE_HOLD_S = 6.0
# Wall seconds of cons_tres's first will-run window (`time_window` in _future_run_test,
# select/cons_tres/job_test.c: fixed in the code, doubling per failed test): backfill
# learns a blocked job's start from running jobs taken off in batches of it
WILLRUN_WINDOW_S = 30.0


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60.0))


@dataclass(frozen=True)
class Backfill:
    """The replay's sched/backfill settings in wall time (what slurm.conf gets); times
    `speedup` they are the trace-time settings the simulator must use to match."""

    interval_s: int  # bf_interval
    resolution_s: int  # bf_resolution
    window_min: int  # bf_window


def backfill_settings(speedup: float, max_limit_min: int) -> Backfill:
    """max_limit_min: the longest wall time limit of the replay, so backfill plans that far."""
    return Backfill(
        interval_s=1,  # a pass every second (default 30)
        resolution_s=max(1, round(SITE_BF_RESOLUTION_S / speedup)),  # default 60 s, scaled
        window_min=max(5, max_limit_min + 1),  # plan beyond the longest limit
    )


def replay_conf(speedup: float, max_limit_min: int) -> str:
    """Extra slurm.conf for `LocalCluster(extra_conf=...)` at this speedup."""
    bf = backfill_settings(speedup, max_limit_min)
    params = [
        "sched_interval=1",  # main scheduler every second (default 60)
        "sched_min_interval=100000",  # at most every 0.1 s on events (default 2 us)
        "batch_sched_delay=0",
        f"bf_interval={bf.interval_s}",
        f"bf_resolution={bf.resolution_s}",
        f"bf_window={bf.window_min}",
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
