"""The ranking composed with Slurm's own priority, as a site's slurm.conf composes it.

With `mode = "site_factor"` Slurm adds the service's SiteFactor to its multifactor
priority (age + fair-share + ...). `fairshare_site_weight` W models that sum in one
key: Slurm's priority (policy/fairshare.py) + W x the job's index as a share in
[0, 1] (`fairshare.index_site_factor`). W bounds how many priority points the
ranking can move a job: against PriorityWeightFairshare it decides whether fair-share
keeps the order between users (W well below it) or only breaks near-ties (W far
above it). The wait guard then either lifts a guarded job above every other job
("promote", fair-share bypassed) or gives it the top SiteFactor, W x 1, which
fair-share can still outweigh ("site"; what a site-factor-only service can do).
"""

from __future__ import annotations

from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.fairshare import index_site_factor, multifactor_priority


def composed_score(
    index: float, guarded: bool, age_s: float, fair_share: float, config: PolicyConfig
) -> float | None:
    """The sort score (lower first) of a job under the composition, or None where the
    composition leaves the job's own score (a guarded job under guard "promote")."""
    if guarded and config.fairshare_guard == "promote":
        return None
    site = 1.0 if guarded else index_site_factor(index)
    prio = multifactor_priority(
        age_s,
        fair_share,
        config.fairshare_weight_age,
        config.fairshare_weight,
        config.fairshare_max_age_s,
    )
    return -(prio + config.fairshare_site_weight * site)


def describe(score: float, config: PolicyConfig) -> str:
    """`explain`'s line for a composed key (score: the key's third field)."""
    return (
        f"composed with Slurm's priority: {-score:.0f} (age + fair-share"
        f" + {config.fairshare_site_weight:g} x the index as a SiteFactor share"
        + (", 1 once wait-guarded)" if config.fairshare_guard == "site" else ")")
    )
