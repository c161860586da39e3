"""The simulator's fair-share usage: Slurm's decay thread over the simulated jobs.

`policy.fairshare.UsageLedger` does the arithmetic; this shell feeds it the running
jobs at each calc pass and the jobs' ends, so the keys of policy "fairshare" (Slurm
alone with its fair-share factor) and of gittins with `fairshare_site_weight` read the
factor Slurm would hold at that time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from slurm_ext.policy import PolicyConfig, UsageLedger


class _Job(Protocol):
    user: str
    gpus: int
    start: float


class SimLedger(UsageLedger):
    """A ledger that runs its pending decay pass when a key asks for a factor."""

    def at(self, user: str, now: float, running: Iterable[_Job]) -> float:
        """The user's factor at `now` (after the decay pass of the last boundary)."""
        if self.last is None or now - self.last >= self.calc_period_s * (1 - 1e-9):
            self.advance(now, ((j.user, j.gpus, j.start) for j in running))
        return self.factor(user)


def fairshare_ledger(cfg: PolicyConfig, jobs: Iterable[_Job]) -> SimLedger | None:
    """A ledger with every trace user as an association (equal shares), or None when the
    policy's keys do not read fair-share."""
    if not cfg.reads_fairshare:
        return None
    return SimLedger(
        users={j.user for j in jobs},
        half_life_s=cfg.fairshare_half_life_s,
        calc_period_s=cfg.fairshare_calc_period_s,
    )
