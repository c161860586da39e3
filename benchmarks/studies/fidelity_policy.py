"""The policy a replay's service really ran, read back from its service.toml (used by
fidelity.py).

A kept replay is re-simulated long after it ran, with today's code. The simulator must
rank as the live service ranked then, not as today's defaults would: a setting added
since is absent from the run's service.toml, and the live service behaved as before it
existed. The oldest kept requeue runs ran without a guard's stint keep
(`wait_guard_keep`, added after them: the next guarded job requeued a job the wait guard
had just started, after `min_run_s`); simulated with today's defaults those stints would
be kept. A setting since removed is read only where it holds today's behaviour
(REMOVED): the early runs' starvation guard over every requeued job is not modelled any
more. The tuning constants are read from `[policy.tuning]` (newer runs) or `[policy]`
(older ones).

The replay writes the policy in wall seconds (`replay.service.scaled_policy`); this
module scales it back to trace seconds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from slurm_ext.core import tomlio
from slurm_ext.policy import PolicyConfig

# settings the replay divides by the speedup (replay.service.scaled_policy)
SCALED = (
    "queue_thresholds_gpu_s",
    "min_run_s",
    "gittins_grid_start_gpu_s",
    "preemption_checkpoint_s",
    "preemption_restart_s",
)
# a setting absent from an older run's config: the behaviour before it existed
BEFORE = {"wait_guard_keep": 0.0}
# settings an older run's config may hold that the policy no longer reads, with the value
# that is today's behaviour (REMOVED_KEYS in slurm_ext/core/config.py says why each went)
REMOVED = {
    "starvation_scope": "backstop",
    "gittins_censored": False,
    "gittins_kind_choice": "finest",
    "gittins_whole_order": "gpu_time",
    "gittins_index": "auto",
    "wait_guard": "promote",
    "wait_guard_budget": 0.0,
    "wait_guard_budget_scope": "cluster",
    "fairshare_guard": "site",
}


def live_policy(mode_dir: Path, speedup: float) -> PolicyConfig | None:
    """The [policy] of the service.toml in `mode_dir`, in trace seconds; None when the run
    kept none (Slurm alone, or no service). A key today's PolicyConfig does not know is an
    error naming it (the run is newer than this code), and so is a removed setting the
    run held at another value than today's behaviour (the policy cannot model it)."""
    path = mode_dir / "service.toml"
    if not path.exists():
        return None
    policy: dict[str, Any] = tomlio.loads(path.read_text()).get("policy", {})
    table = {k: v for k, v in policy.items() if k != "tuning"} | policy.get("tuning", {})
    changed = sorted(k for k, v in table.items() if k in REMOVED and v != REMOVED[k])
    if changed:
        raise ValueError(f"{path}: [policy] ran settings this code removed: {', '.join(changed)}")
    table = {k: v for k, v in table.items() if k not in REMOVED}
    known = {f.name for f in dataclasses.fields(PolicyConfig)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"{path}: [policy] has settings this code lacks: {', '.join(unknown)}")
    values = {k: v for k, v in BEFORE.items() if k not in table} | table
    for name in SCALED:
        if name in values:
            v = values[name]
            values[name] = (
                [_back(x, speedup) for x in v] if isinstance(v, list) else _back(v, speedup)
            )
    return PolicyConfig(**values)


def _back(wall: float, speedup: float) -> float:
    """A wall-time setting in trace seconds, to 9 significant digits: the replay divided a
    round trace value (3,600 s at speedup 1,750 reads back 3599.9999999999995)."""
    return float(f"{wall * speedup:.9g}")
