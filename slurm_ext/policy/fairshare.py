"""Slurm alone as sites run it: priority/multifactor with age and classic fair-share.

The baseline the fairness benchmarks measure against is Slurm "with its fair-share
factor on" (benchmarks.studies.targets, `user_*` columns). This
module is Slurm 25.11's arithmetic (src/plugins/priority/multifactor/
priority_multifactor.c), restricted to the two factors that move here:

- age factor = min(age / PriorityMaxAge, 1), age counted from the job's accrue time
  (its submit; `_set_priority_factors`);
- classic fair-share factor F = 2^(-(usage_efctv / shares_norm) / damp)
  (`_set_assoc_fs_factor`; damp = FairShareDampeningFactor = 1). With every user an
  association directly under root (flat tree, FairShare=1 each, sacctmgr's default)
  usage_efctv = usage_norm = the user's decayed usage / root's (`_set_assoc_usage_efctv`),
  shares_norm = 1 / users;
- decayed usage: each PriorityCalcPeriod the decay thread multiplies every usage by
  decay^dt with decay = 1 - 0.693 / PriorityDecayHalfLife (per second, `_apply_decay`),
  then adds each running job's run_delta x decay^run_delta x its TRES (here GPUs,
  as with TRESBillingWeights=GRES/gpu=1) since the last run; a job that ends is charged
  for its last stretch at once (`priority_p_job_end`);
- priority = PriorityWeightAge x age + PriorityWeightFairshare x F (+ the SiteFactor
  the service writes, and factors left at weight 0), truncated to an integer, ties by
  job id (submit order).

Fair Tree (PriorityFlags default since 19.05) ranks users by the same usage/shares
ratio, so in a flat tree it orders users as the classic factor does; the factor's
values, and so how it trades against age, differ. The shells keep a `UsageLedger` and
pass each pending job its user's factor; the functions here are pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

LN2_SLURM = 0.693  # Slurm's own rounding of ln 2 in the decay factor


def decay_per_second(half_life_s: float) -> float:
    """Slurm's decay factor per second (1: no decay, PriorityDecayHalfLife=0)."""
    return 1.0 - LN2_SLURM / half_life_s if half_life_s > 0 else 1.0


def age_factor(age_s: float, max_age_s: float) -> float:
    """PriorityMaxAge saturation: 0 at submit, 1 from max_age_s on."""
    if max_age_s <= 0:
        return 1.0
    return min(1.0, max(0.0, age_s) / max_age_s)


def fairshare_factor(usage: float, total: float, shares_norm: float) -> float:
    """Classic fair-share factor 2^(-(usage / total) / shares_norm) (1 with no usage)."""
    if total <= 0 or usage <= 0:
        return 1.0
    return 2.0 ** (-(usage / total) / shares_norm)


def multifactor_priority(
    age_s: float, fair_share: float, weight_age: float, weight_fairshare: float, max_age_s: float
) -> int:
    """Slurm's job priority from the age and fair-share factors (other weights 0)."""
    return math.floor(weight_age * age_factor(age_s, max_age_s) + weight_fairshare * fair_share)


SITE_TOP_GPU_S = 60.0  # a predicted GPU-time this short or shorter gets the full term
SITE_DECADES = 6.0  # ... and one 10^6 x longer (about 700 GPU-days) nothing


def index_site_factor(index: float) -> float:
    """A Gittins index as a SiteFactor share in [0, 1]: log-linear in the predicted
    GPU-time 1 / index, 1 at SITE_TOP_GPU_S, 0 at SITE_DECADES decades beyond."""
    if index <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 + math.log10(index * SITE_TOP_GPU_S) / SITE_DECADES))


@dataclass
class UsageLedger:
    """Decayed GPU-second usage per user, advanced at Slurm's calc period.

    users: every association (user) with shares; a user not listed gets shares too
    (added on first charge, as sacctmgr would have it). `factor(user, now, running)`
    runs the decay thread's pass for the last calc-period boundary <= now if it has not
    run yet, so every job re-keyed at one boundary reads the same factors.
    """

    users: set[str]
    half_life_s: float
    calc_period_s: float
    raw: dict[str, float] = field(default_factory=dict)
    last: float | None = None  # time of the last decay pass (g_last_ran); None: none yet
    factors: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.calc_period_s <= 0:
            raise ValueError("fairshare calc period must be > 0 seconds")
        self.decay = decay_per_second(self.half_life_s)

    def charge(self, user: str, gpus: int, start: float, end: float) -> None:
        """A job's use from max(start, last pass) to `end` (its end, or a pass)."""
        self.users.add(user)
        dt = end - (start if self.last is None else max(start, self.last))
        if dt > 0 and gpus > 0:
            self.raw[user] = self.raw.get(user, 0.0) + gpus * dt * self.decay**dt

    def advance(self, now: float, running: Iterable[tuple[str, int, float]]) -> None:
        """The decay pass at the last boundary <= now: decay, charge running jobs
        ((user, GPUs, start) each) up to it, recompute every user's factor."""
        at = math.floor(now / self.calc_period_s + 1e-9) * self.calc_period_s  # see ranking
        if self.last is not None and at <= self.last:
            return
        # the first pass starts the clock (a trace may start at any epoch time)
        d = 1.0 if self.last is None else self.decay ** (at - self.last)
        for u in self.raw:
            self.raw[u] *= d
        for user, gpus, start in running:
            self.charge(user, gpus, start, at)
        self.last = at
        total = sum(self.raw.values())
        shares_norm = 1.0 / max(1, len(self.users))
        self.factors = {u: fairshare_factor(v, total, shares_norm) for u, v in self.raw.items()}

    def factor(self, user: str) -> float:
        """The user's fair-share factor as of the last pass (1 for a user with no usage)."""
        return self.factors.get(user, 1.0)
