"""When an opportunistic job on a shard should give way: two pure rules shared by the
simulator (sim/coloc.py) and, for the requeue, meant for the service's pass.

An opportunistic job paused beside a long guaranteed job stays paused on its shard while
its Slurm time limit runs (the freezer is invisible to slurmctld), then dies at its limit:
measured in docs/benchmarks.md ("Co-location against Slurm alone"). Two ways out:
- `overdue`: requeue a job paused longer than `max_pause_s` (the agent cannot requeue;
  the service can, with `scontrol requeue`), so it queues again for a shard or whole GPUs
  with a fresh time limit, from its last checkpoint;
- `ends_before`: offer a shard beside a guaranteed job only if that job's time limit
  ends before the opportunistic job's would, so a pause lasts at most the rest of the
  guaranteed job's limit, which fits inside the newcomer's;
- `shard_offered`: after a requeue, keep the job off the neighbour that paused it
  (`after_requeue = "not_beside"`) or off every neighbour whose limit ends after its own
  (`"ends_first"`): without it a requeued job lands on the first free shard, often beside
  the same long job, and is paused and requeued again (churn, docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

AFTER_REQUEUE = ("any", "not_beside", "ends_first")


def overdue(paused_since: Mapping[int, float], now: float, max_pause_s: float) -> list[int]:
    """The jobs paused for `max_pause_s` or longer (none when `max_pause_s` <= 0), sorted."""
    if not max_pause_s > 0:
        return []
    return sorted(j for j, t in paused_since.items() if now - t >= max_pause_s - 1e-9)


def ends_before(
    guaranteed_end: float | None, now: float, opportunistic_limit_s: float | None
) -> bool:
    """Whether a guaranteed job whose limit ends at `guaranteed_end` (None: no limit) ends
    before an opportunistic job with `opportunistic_limit_s` started `now` would."""
    g = math.inf if guaranteed_end is None else guaranteed_end
    o = math.inf if opportunistic_limit_s is None else now + opportunistic_limit_s
    return g < o or (math.isinf(g) and math.isinf(o))


def shard_offered(
    neighbour: int,
    neighbour_end: float | None,
    now: float,
    limit_s: float | None,
    *,
    paused_by: Collection[int] = (),
    requeued: bool = False,
    ends_first: bool = False,
    after_requeue: str = "any",
) -> bool:
    """Whether an opportunistic job (time limit `limit_s`, starting `now`) is offered a
    shard beside guaranteed job `neighbour`, whose limit ends at `neighbour_end`.
    `ends_first`: `ends_before` for every job; `after_requeue` ("any", "not_beside",
    "ends_first"): what a job that was `requeued` after a pause avoids - the guaranteed
    jobs that paused it (`paused_by`), or every neighbour whose limit ends after its own."""
    if after_requeue not in AFTER_REQUEUE:
        raise ValueError(f"after_requeue must be one of {AFTER_REQUEUE}, got {after_requeue!r}")
    if requeued and after_requeue == "not_beside" and neighbour in paused_by:
        return False
    if ends_first or (requeued and after_requeue == "ends_first"):
        return ends_before(neighbour_end, now, limit_s)
    return True
