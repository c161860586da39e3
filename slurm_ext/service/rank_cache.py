"""The policy's order for a service pass, redoing only what can have changed since the
last pass.

Most of a queue waits, and a waiting job's sort key changes only when its inputs do or
at the moment `policy.ranking.key_and_change` names (a promotion, a wait-guard tier);
its decision (queue, index, reason) changes only with its key,
unless the starvation guard promoted it (its reason counts the seconds it waited). So,
while the Gittins table is the same (the same history and policy), a waiting job whose
view the service reused keeps its key until that moment and its decision while its key
stands (keys that read Slurm's age factor are computed afresh every pass). The
result is `policy.rank`'s, decision for decision: the simulator's
incremental keys (sim/keys.py) rest on the same `key_and_change`, and tests hold this
cache to `rank` pass after pass.

The simulator keeps its own incremental keys rather than this cache: it is told of every
change (an event re-keys the job, a wake-up comes at the moment `key_and_change` names),
so a key cache there would never hit and only cost its bookkeeping (measured in
sim/keys.py), while this one polls: a pass sees every job and must find out which keys
still hold. What both need, the key and when it changes, is `key_and_change` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ext.core.model import Completed, Decision, JobView
from slurm_ext.policy import GittinsTable, Key, PolicyConfig, build_table, decide, key_and_change
from slurm_ext.store.rows import copy_with

# a key is recomputed this long before the moment it may change: a float's rounding of
# (now + after) must not let a pass keep a key just past that moment
MARGIN_S = 1e-3


@dataclass
class _Kept:
    view: JobView  # the view the key was computed from (the service reuses waiting views)
    key: Key
    until: float  # the key holds for passes before this time
    decision: Decision | None  # its decision (any rank), reusable while the key holds


class RankCache:
    """`policy.rank` over a service's successive passes (one instance per service)."""

    def __init__(self) -> None:
        self._history: list[Completed] | None = None
        self._config: PolicyConfig | None = None
        self._table: GittinsTable | None = None
        self._kept: dict[int, _Kept] = {}
        self._order: list[int] = []  # last pass's job ids, best first

    def rank(
        self,
        views: Sequence[JobView],
        now: float,
        config: PolicyConfig,
        history: list[Completed] | None,
    ) -> list[Decision]:
        """`policy.rank(views, now, config, history)`."""
        table, same = self._table_for(config, history)
        old = self._kept if same and _keys_keep(config) else {}
        by_id: dict[int, tuple[Key, JobView]] = {}
        kept: dict[int, _Kept] = {}
        for v in views:
            k = old.get(v.job_id)
            if k is None or k.view is not v or now >= k.until:
                key, after = key_and_change(v, now, config, table)
                k = _Kept(v, key, now + after - MARGIN_S, None)
            kept[v.job_id] = k
            by_id[v.job_id] = (k.key, v)
        # last pass's order first: sorting a nearly sorted list is nearly linear
        keyed = [by_id.pop(j) for j in self._order if j in by_id]
        keyed += by_id.values()
        keyed.sort(key=_first)
        # a decision reads `now` only in a promoted job's reason and in multifactor's
        reuse = config.policy != "multifactor"
        out = []
        for i, (key, v) in enumerate(keyed):
            k = kept[v.job_id]
            d = k.decision
            if d is None or not reuse or d.promoted:
                d = k.decision = decide(i, key, v, now, config, table)
            elif d.rank != i:
                d = copy_with(d, rank=i)
            out.append(d)
        self._kept, self._order = kept, [d.job_id for d in out]
        return out

    def key_of(self, job_id: int) -> Key:
        """The sort key the last `rank` gave a job of its order."""
        return self._kept[job_id].key

    def _table_for(
        self, config: PolicyConfig, history: list[Completed] | None
    ) -> tuple[GittinsTable | None, bool]:
        """The Gittins table `rank` would build, and whether it is last pass's (same
        history, same policy): only then do kept keys and decisions still hold."""
        if config.policy != "gittins":
            table = None
        elif history == self._history and config == self._config:
            return self._table, True
        else:
            table = build_table(history, config)
        same = table is None and self._table is None and config == self._config
        self._history, self._config, self._table = history, config, table
        return table, same


def _keys_keep(config: PolicyConfig) -> bool:
    """Whether a waiting job's key holds until the moment `key_and_change` names. Not
    under Slurm's own multifactor priority (policy "fairshare", or composed with it):
    its age factor grows with every second, while the simulator (which re-keys at
    Slurm's calc passes) is told the next calc pass."""
    if config.policy == "fairshare":
        return False
    return not (config.policy == "gittins" and config.fairshare_site_weight > 0)


def _first(pair: tuple[Key, JobView]) -> Key:
    return pair[0]
