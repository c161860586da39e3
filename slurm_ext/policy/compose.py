"""The ranking composed with Slurm's own priority, as a site's slurm.conf composes it.

With `mode = "site_factor"` Slurm adds the service's SiteFactor to its multifactor
priority (age + fair-share + ...). `fairshare_site_weight` W models that sum in one
key: Slurm's priority (policy/fairshare.py) + W x the job's index as a share in
[0, 1] (`fairshare.index_site_factor`). W bounds how many priority points the
ranking can move a job: against PriorityWeightFairshare it decides whether fair-share
keeps the order between users (W well below it) or only breaks near-ties (W far
above it). The wait guard gives a guarded job the top SiteFactor, W x 1, which
fair-share can still outweigh (what a site-factor-only service can do).

`site_factor` is what the service writes as each pending job's SiteFactor, so a live
Slurm sums what the simulator modelled; the service's own order (`live_key`) then reads
Slurm's priority without its site factor, plus the new one.
"""

from __future__ import annotations

from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.fairshare import index_site_factor, multifactor_priority
from slurm_ext.policy.guards import GUARDED


def site_factor(score: float, config: PolicyConfig) -> int:
    """The SiteFactor of a job whose uncomposed gittins score (a key's third field: minus
    its index, GUARDED once wait-guarded) is `score`: round(W x share), the share
    `index_site_factor` of the index, 1 when guarded. The one mapping: the service writes
    it (mode "site_factor") and the simulator's composed key adds it, so both sum the
    same integer onto Slurm's (integer) multifactor priority."""
    share = 1.0 if score == GUARDED else index_site_factor(-score)
    return round(config.fairshare_site_weight * share)


def composed_score(score: float, age_s: float, fair_share: float, config: PolicyConfig) -> float:
    """The sort score (lower first) of a job whose uncomposed gittins score is `score`,
    under the composition: minus Slurm's priority with `site_factor` as its SiteFactor."""
    prio = multifactor_priority(
        age_s,
        fair_share,
        config.fairshare_weight_age,
        config.fairshare_weight,
        config.fairshare_max_age_s,
    )
    return -float(prio + site_factor(score, config))


def live_key(key: tuple, slurm_priority: int) -> tuple:
    """A gittins key (protected?, queue, score, submit, job id) with its score replaced
    by a priority Slurm reports: the order Slurm applies to its pending jobs (highest
    priority first, ties by job id, i.e. submit order). The queue stays first, as in the
    simulator's composed key: a job requeued past a queue threshold waits behind queue
    0 here and there, where Slurm's sum has no such term (docs/admin-guide.md)."""
    return (key[0], key[1], -float(slurm_priority), key[3], key[4])


def describe(score: float, config: PolicyConfig) -> str:
    """`explain`'s line for a composed key (score: the key's third field)."""
    return (
        f"composed with Slurm's priority: {-score:.0f} (age + fair-share"
        f" + {config.fairshare_site_weight:g} x the index as a SiteFactor share"
        ", 1 once wait-guarded)"
    )
