"""The service's composed SiteFactor: what it writes, and the order Slurm will apply.

With `mode = "site_factor"` and `policy.fairshare_site_weight` W > 0 (policy "gittins")
the simulator models Slurm's priority as its own multifactor sum + W x the index share
(`policy.compose.site_factor`). The service writes exactly that integer as each pending
job's SiteFactor, so the sum slurmctld computes is the one simulated (not rank-spaced
values that keep only the order).

The service's own order (preemption victims, `explain`, the user view) is then the
order Slurm applies: Slurm's priority without the job's current site factor, as squeue
and sprio report them, plus the new site factor (`policy.compose.live_key`). Read from
Slurm rather than rebuilt from the users' fair-share factors (sshare) and the model's
weights: the reported priority already holds every factor the site weights (age from
the eligible time, Fair Tree or classic fair-share, partition, QOS, nice), so the
order is Slurm's own even where slurm.conf and the model's weights differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter

from slurm_ext.core.model import Decision, Job
from slurm_ext.policy import GUARDED, Key, PolicyConfig, live_key, site_factor
from slurm_ext.store.rows import DecisionRecord, copy_with


def slurm_base(job: Job, stored: DecisionRecord | None) -> int:
    """Slurm's priority of `job` without its site factor: for a pending job the priority
    less the site factor Slurm reports (squeue, or sprio where squeue lacks it: the
    composition needs priority/multifactor, where sprio answers); a running job's
    priority is the one it started with, holding the value this service last wrote
    (sprio lists no running jobs)."""
    if job.pending:
        return job.priority - job.site_factor
    held = stored.value if stored is not None and stored.value is not None else 0
    return job.priority - held


def compose(
    decisions: Sequence[Decision],
    key_of: Callable[[int], Key],
    by_id: Mapping[int, Job],
    stored: Mapping[int, DecisionRecord],
    config: PolicyConfig,
) -> tuple[list[Decision], dict[int, int]]:
    """The pass's order as Slurm will apply it, and every job's site factor.

    `decisions`: `rank`'s under `config` with W set to 0 (the index alone); `key_of`:
    each job's key from that ranking (its third field the uncomposed score the
    simulator's composed key reads). Ranks are renumbered along Slurm's order; each
    reason says the site factor."""
    sites: dict[int, int] = {}
    by_score: dict[float, int] = {}  # jobs of a kind share a score
    rows = []
    for d in decisions:
        j = d.job_id
        key = key_of(j)
        score = key[2]
        site = by_score.get(score)
        if site is None:
            site = by_score[score] = site_factor(score, config)
        sites[j] = site
        slurm = slurm_base(by_id[j], stored.get(j)) + site
        rows.append((live_key(key, slurm), d, score == GUARDED))
    rows.sort(key=itemgetter(0))  # the rows' decisions do not compare
    w = config.fairshare_site_weight
    out = []
    for i, (_, d, guarded) in enumerate(rows):
        share = "all of it: wait-guarded" if guarded else "the index as a share"
        reason = f"{d.reason}; SiteFactor {sites[d.job_id]} of {w:g} ({share}) on Slurm's priority"
        out.append(copy_with(d, rank=i, reason=reason))
    return out, sites


SITE_FACTOR_MAX = 2_000_000_000  # as value_max in site_factor mode (scontrol takes < 2^31)


def check_composition(mode: str, policy: PolicyConfig) -> None:
    """`policy.fairshare_site_weight` W > 0 only where the service can write the sum the
    simulator models: a SiteFactor (values in [0, W]) beside Slurm's own priority."""
    w = policy.fairshare_site_weight
    if w <= 0:
        return
    if mode == "priority":
        raise ValueError(
            f"policy.fairshare_site_weight = {w:g} composes the index with Slurm's own"
            ' priority, but mode = "priority" overwrites that priority: use mode ='
            ' "site_factor", or fairshare_site_weight = 0'
        )
    if w > SITE_FACTOR_MAX:
        raise ValueError(
            f"policy.fairshare_site_weight = {w:g} does not fit a SiteFactor"
            f" (at most {SITE_FACTOR_MAX})"
        )
