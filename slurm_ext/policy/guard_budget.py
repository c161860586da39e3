"""The wait guard's budget (`wait_guard_budget`): which of the jobs the guard is due for
it lifts now, a rule across the pass's pending jobs that no per-job key can express.

Why: the guard fires 10 x a job's predicted run after it began waiting, for a whole
recurring kind at once (39-195 wide jobs on the recurring-user traces) or for most of a
sustained backlog (65-87 % of pending jobs); lifted jobs then queue first come first
served and wide ones wait a day or more for whole nodes (docs/benchmarks.md, Session 6).
Bounded, the guard lifts the due jobs in the order they became due while their GPUs fit
a share of the cluster (the first always, so every due job is lifted in turn: no
starvation); the rest keep their index's rank until earlier lifted jobs start.

The service (`ranking.rank`, `rank_cache`) and the simulator (sim/keys.py) both call
`budget_lifts` on the pending jobs the guard is due for (`guards.guard_deadline`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from slurm_ext.core.model import JobView
from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.gittins import GittinsTable
from slurm_ext.policy.guards import guard_deadline, guard_promotes

# a job the guard is due for: (deadline, job id, GPUs, owner: `owner`)
Due = tuple[float, int, int, str]


def budgeted(config: PolicyConfig) -> bool:
    """Whether the wait guard ("promote") lifts within a budget (`wait_guard_budget`)."""
    return config.wait_guard_budget > 0 and guard_promotes(config)


def owner(config: PolicyConfig, user: str) -> str:
    """Whose budget a due job draws on: its user's (`wait_guard_budget_scope = "user"`)
    or the one cluster-wide budget ("")."""
    return user if config.wait_guard_budget_scope == "user" else ""


def budget_lifts(due: Iterable[Due], total_gpus: int, share: float) -> set[int]:
    """The ids of the due jobs the guard lifts now, per owner: in deadline order (ties by
    id), the owner's first always, then each while its lifted jobs' GPUs stay within
    `share` x `total_gpus`; the first that does not fit ends the owner's lift, so a wide
    job that became due first is not passed by narrower ones that became due after it."""
    room = share * total_gpus
    out: set[int] = set()
    held: dict[str, int] = {}
    full: set[str] = set()
    for _, job_id, gpus, who in sorted(due):
        if who in full:
            continue
        if who in held and held[who] + gpus > room:
            full.add(who)
            continue
        out.add(job_id)
        held[who] = held.get(who, 0) + gpus
    return out


def view_deadline(job: JobView, config: PolicyConfig, table: GittinsTable | None) -> float:
    """`guard_deadline` of a waiting job's view (inf for a running one)."""
    if job.running:
        return float("inf")
    since = job.waiting_since if job.waiting_since is not None else job.submit_time
    return guard_deadline(
        config, table, job.gpus, job.attained_gpu_s, since,
        job.user, job.job_name, job.account, job.time_limit_s,
    )  # fmt: skip


def held_back(
    jobs: Sequence[JobView],
    now: float,
    config: PolicyConfig,
    table: GittinsTable | None,
    total_gpus: int,
) -> set[int]:
    """The ids of the waiting jobs the guard is due for but the budget holds back (empty
    without a budget): they keep their index's rank this pass."""
    if not budgeted(config):
        return set()
    deadlines = {j.job_id: view_deadline(j, config, table) for j in jobs}
    return held_among(jobs, deadlines, now, config, total_gpus)


def held_among(
    jobs: Sequence[JobView],
    deadlines: Mapping[int, float],
    now: float,
    config: PolicyConfig,
    total_gpus: int,
) -> set[int]:
    """`held_back` from each job's `view_deadline` (the service's rank cache keeps them
    while a job's key holds)."""
    due = [
        (d, j.job_id, j.gpus, owner(config, j.user))
        for j in jobs
        if (d := deadlines[j.job_id]) <= now
    ]
    return {d[1] for d in due} - budget_lifts(due, total_gpus, config.wait_guard_budget)


def describe_held(config: PolicyConfig) -> str:
    """`explain`'s line for a job the budget holds back."""
    share = f"{config.wait_guard_budget:g} of the GPUs"
    if config.wait_guard_budget_scope == "user":
        full = f"its user's jobs due earlier fill the budget (each user's may hold {share})"
    else:
        full = f"jobs due earlier fill the budget (lifted jobs may hold {share})"
    return (
        f"wait guard due (waited >= {config.wait_guard_factor:g} x its predicted run) but"
        f" held back by its budget: {full}; ranked by its index until they start"
    )
