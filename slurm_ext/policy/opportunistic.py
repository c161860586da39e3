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
  guaranteed job's limit, which fits inside the newcomer's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


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
