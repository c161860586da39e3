"""Job order: one sort key per job, computed from what a live service can see.

`priority_key` is the single source of truth; `rank` sorts by it and explains, and the
simulator keeps the same keys in incremental heaps. Lower keys run first:
(protected?, queue, score, submit_time, job_id) with score = -Gittins index, a size/age
priority or, for oracles only, the true (remaining) GPU-time.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from slurm_ext.core.model import Decision, JobView
from slurm_ext.policy.compose import composed_score, describe
from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.fairshare import multifactor_priority
from slurm_ext.policy.gittins import GittinsTable, class_label, gpu_class
from slurm_ext.policy.guards import GUARDED, kept_guard_s, lifted, own_table, waited_since
from slurm_ext.policy.queues import (
    queue_of,
    queue_scale,
    queue_service,
    starvation_lifts,
    uses_queues,
)
from slurm_ext.policy.tables import History, build_table

Key = tuple[int, int, float, float, int]


def key_and_change(
    job: JobView,
    now: float,
    config: PolicyConfig,
    table: GittinsTable | None,
    fair_share: float = 1.0,
) -> tuple[Key, float]:
    """The one definition of a job's sort key and of when it next changes on its own.

    `job`: the job's facts (the service's view; the simulator's `SimJob.view`). The
    second value is the seconds until the key may change on its own (inf: only events
    change it): running jobs at the end of protection, at queue thresholds and at
    Gittins grid points; pending jobs at promotion; SRTF continuously (0). Only oracles
    read `true_duration_s`; the job's kind picks its Gittins table (policy/kinds.py).
    `fair_share`: the user's factor at the last calc pass (policy "fairshare", gittins
    with `fairshare_site_weight`); keys that read it change at the next pass. One body
    for the queued policies (the simulator's hot path: no further call but the table's).
    """
    p = config.policy
    if p != "gittins" and p != "las":
        return _plain_key(job, now, config, fair_share)
    running, gpus, attained = job.running, job.gpus, job.attained_gpu_s
    last_run_s, promoted_at = job.last_run_s, job.promoted_at_gpu_s
    min_run_s = config.min_run_s
    prot = 0 if running and last_run_s < min_run_s else 1
    after = math.inf
    thresholds = config.queue_thresholds_gpu_s
    e = config.queue_gpu_exponent  # queue_scale() inlined: limits x GPUs ** exponent
    scale = gpus**e if e and gpus > 1 else 1.0
    if running:
        qs = attained
        if promoted_at is not None:
            qs = attained - promoted_at
            if not qs > 0.0:  # max(0.0, qs)
                qs = 0.0
        queue = bisect.bisect_right(thresholds, qs / scale)
        if prot == 0:
            after = min_run_s - last_run_s
        if gpus > 0 and queue < len(thresholds):
            t = (thresholds[queue] * scale - qs) / gpus
            if t < after:
                after = t
    else:
        queue = bisect.bisect_right(thresholds, attained / scale)
    score = index = 0.0
    if p == "gittins" and table is not None and table.samples:
        table = own_table(job, table)
        index, change_at = table.step(attained)
        score = -index
        if running and gpus > 0:
            t = (change_at - attained) / gpus
            if t < after:
                after = t
            if promoted_at is not None and config.wait_guard_keep > 0:
                # a stint a guard started keeps the guard's rank (queue 0, ahead of
                # every unguarded job) for a while
                left = kept_guard_s(job, table, config)
                if left > 0.0:
                    queue, score = 0, GUARDED
                    if left < after:
                        after = left
        elif not running and config.wait_guard_factor > 0 and index > 0 and gpus > 0:
            # wait guard: waited >= factor x its predicted run (1 / index GPU-seconds
            # over its GPUs) -> ahead of every unguarded job, first come first served
            since = job.waiting_since if job.waiting_since is not None else job.submit_time
            left = since + config.wait_guard_factor / (index * gpus) - now
            if left <= 0.0:
                score = GUARDED
            elif left < after:
                after = left
    if not running and config.starvation_factor > 0 and last_run_s > 0:
        queue, after = _starvation_terms(job, now, config, index, queue, after)
    if p == "gittins" and config.fairshare_site_weight > 0:
        # composed with Slurm's multifactor (policy/compose.py; no history: index 0)
        score = composed_score(score, now - job.submit_time, fair_share, config)
        after = min(after, _to_next_pass(now, config))
    return (prot, queue, score, job.submit_time, job.job_id), after


def _starvation_terms(
    job: JobView, now: float, config: PolicyConfig, index: float, queue: int, after: float
) -> tuple[int, float]:
    """`starved` inlined for a waiting job that has run: waited >= factor x last stint ->
    queue 0, else the key changes when it will have; only for a job the wait guard cannot
    judge (`wait_judged`: no index to scale its wait by). (queue, after) from the key's."""
    factor = config.starvation_factor
    judged = (
        index > 0.0 and job.gpus > 0 and config.policy == "gittins" and config.wait_guard_factor > 0
    )
    if judged:
        return queue, after
    since = job.waiting_since if job.waiting_since is not None else job.submit_time
    if now - since >= factor * job.last_run_s:
        return 0, after
    left = since + factor * job.last_run_s - now
    if not left > 0.0:  # max(0.0, left)
        left = 0.0
    return queue, left if left < after else after


def _plain_key(
    job: JobView, now: float, config: PolicyConfig, fair_share: float
) -> tuple[Key, float]:
    """`key_and_change` for the unqueued policies (fifo, fairshare, multifactor and the
    oracles)."""
    p = config.policy
    running, gpus, submit_time, job_id = job.running, job.gpus, job.submit_time, job.job_id
    prot = 0 if running and job.last_run_s < config.min_run_s else 1
    after = math.inf
    if running and prot == 0:
        after = config.min_run_s - job.last_run_s
    if p == "fifo":
        return (prot, 0, 0.0, submit_time, job_id), after
    if p == "fairshare":  # Slurm alone: age + fair-share, recomputed each calc pass
        if running:
            return (prot, 0, 0.0, submit_time, job_id), after
        prio = multifactor_priority(
            now - submit_time,
            fair_share,
            config.fairshare_weight_age,
            config.fairshare_weight,
            config.fairshare_max_age_s,
        )
        return (prot, 0, -float(prio), submit_time, job_id), _to_next_pass(now, config)
    if p == "multifactor":
        # age x w_a + gpus x w_s; the age term is now x w_a - submit x w_a, and now is shared.
        score = -(
            config.multifactor_size_weight * gpus
            - config.multifactor_age_weight * submit_time / 3600.0
        )
        return (prot, 0, score, submit_time, job_id), after
    if job.true_duration_s is None:
        raise ValueError(f"job {job_id}: oracle policy needs true_duration_s")
    total = gpus * job.true_duration_s
    if p == "sjf":
        return (prot, 0, total, submit_time, job_id), after
    if p == "srtf":
        after = 0.0 if running else math.inf
        return (prot, 0, total - gpus * job.executed_s, submit_time, job_id), after
    raise ValueError(f"unknown policy {p!r}")


def _to_next_pass(now: float, config: PolicyConfig) -> float:
    """Seconds to the next fair-share calc pass (a boundary a hair away counts as now)."""
    period = config.fairshare_calc_period_s
    return (math.floor(now / period + 1e-9) + 1) * period - now


def priority_key(
    job: JobView,
    now: float,
    config: PolicyConfig,
    table: GittinsTable | None,
    fair_share: Mapping[str, float] | None = None,
) -> Key:
    """The sort key of one job (`key_and_change`); only oracle policies read
    `true_duration_s`. `fair_share`: user -> factor (policy/fairshare.py), missing: 1."""
    fs = 1.0 if fair_share is None else fair_share.get(job.user, 1.0)
    return key_and_change(job, now, config, table, fs)[0]


def key_change_after(
    job: JobView, now: float, config: PolicyConfig, table: GittinsTable | None
) -> float:
    """Seconds until this job's key may change on its own (inf: only events change it).

    Running jobs change at the end of protection, at queue thresholds and at Gittins grid
    points; pending jobs at promotion. SRTF changes continuously and returns 0.
    """
    return key_and_change(job, now, config, table)[1]


def job_table(job: JobView, table: GittinsTable) -> tuple[GittinsTable, str]:
    """The table a job's Gittins index reads and the group it came from ("" when the
    table has neither classes nor kinds)."""
    if table.kinds is not None:
        c = table.kinds.choose(job.gpus, job.user, job.job_name, job.account, job.time_limit_s)
        own = c.pick(job.attained_gpu_s)
        label = c.label
        if own is not c.table:
            label += f", truncated at its time limit ({c.cap:.0f} GPU-s)"
        return own, label
    own = table.for_gpus(job.gpus)
    return own, (f"{class_label(gpu_class(job.gpus))} class" if own is not table else "")


def _chosen(
    job: JobView, config: PolicyConfig, table: GittinsTable | None
) -> tuple[GittinsTable, str] | None:
    """`job_table` where the Gittins index applies (gittins with a history), else None."""
    if config.policy != "gittins" or table is None or not table.samples:
        return None
    return job_table(job, table)


def _reported_index(
    job: JobView,
    key: Key,
    config: PolicyConfig,
    table: GittinsTable | None,
    chosen: tuple[GittinsTable, str] | None = None,
) -> float:
    """Decision.index: the exact Gittins index (the key holds it rounded, see
    `gittins.ranking_index`), else the key's score. `chosen`: `_chosen`'s answer."""
    if config.policy != "gittins":
        return key[2]
    if table is None or not table.samples:
        return -key[2]
    own = (chosen or job_table(job, table))[0]
    return own.index(job.attained_gpu_s)


def explain(
    job: JobView,
    key: Key,
    now: float,
    config: PolicyConfig,
    table: GittinsTable | None,
    chosen: tuple[GittinsTable, str] | None = None,
) -> str:
    """A short human-readable reason for the job's place in the order (`chosen`: the
    job's `job_table`, when the caller has it)."""
    parts: list[str] = []
    if key[0] == 0:
        parts.append(
            f"protected: running {job.last_run_s:.0f} s < min_run_s {config.min_run_s:.0f} s"
        )
    p = config.policy
    if uses_queues(config):
        scale = queue_scale(job.gpus, config)
        ts = [t * scale for t in config.queue_thresholds_gpu_s]
        qs = queue_service(job)
        q = queue_of(qs, job.gpus, config)
        since = " since promotion" if job.running and job.promoted_at_gpu_s is not None else ""
        where = f"queue {q} (attained {qs:.0f} GPU-s{since}"
        where += f" >= {ts[q - 1]:.0f}" if q > 0 else f" < {ts[0]:.0f}" if ts else ""
        where += f", limits x {scale:.3g} for {job.gpus} GPUs)" if scale != 1.0 else ")"
        parts.append(where)
        if p == "gittins":
            if table is not None and table.samples:
                own, label = chosen or job_table(job, table)
                exact = own.index(job.attained_gpu_s)
                parts.append(
                    f"gittins {exact:.3g} from {label or 'pooled'} ({own.samples} completed jobs)"
                )
            else:
                parts.append("no history yet: 2D-LAS order")
            if key[2] == GUARDED and job.running:
                parts.append(
                    f"started under a guard: keeps its rank for {config.wait_guard_keep:g} x"
                    " its predicted run"
                )
            elif key[2] == GUARDED:
                parts.append(
                    f"wait guard: waited >= {config.wait_guard_factor:g} x its predicted run,"
                    " ahead of unguarded jobs"
                )
            elif config.fairshare_site_weight > 0:
                parts.append(describe(key[2], config))
        if starvation_lifts(job, now, config, table):
            since = waited_since(job)
            parts.append(
                f"promoted to queue 0: waited {now - since:.0f} s >= "
                f"{config.starvation_factor:g} x last run {job.last_run_s:.0f} s"
            )
    elif p == "fifo":
        parts.append(f"fifo: submitted {job.submit_time:.0f}")
    elif p == "fairshare":
        parts.append(f"slurm multifactor priority {-key[2]:.0f} (age + fair-share)")
    elif p == "multifactor":
        age_h = max(0.0, now - job.submit_time) / 3600.0
        a = config.multifactor_age_weight * age_h
        s = config.multifactor_size_weight * job.gpus
        parts.append(f"priority {a + s:.0f} = age {a:.0f} + size {s:.0f}")
    elif p == "sjf":
        parts.append(f"oracle sjf: true size {key[2]:.0f} GPU-s")
    else:
        parts.append(f"oracle srtf: true remaining {key[2]:.0f} GPU-s")
    return "; ".join(parts)


def rank(
    jobs: Sequence[JobView],
    now: float,
    config: PolicyConfig,
    history: History = None,
    fair_share: Mapping[str, float] | None = None,
) -> list[Decision]:
    """Order jobs (running and pending) best first; Decision.rank 0 runs first.

    `history` is the completed jobs' GPU-seconds or a prebuilt GittinsTable; without it
    the gittins policy falls back to 2D-LAS and says so in each reason.
    `fair_share` (user -> Slurm's fair-share factor) feeds policy "fairshare" and
    `fairshare_site_weight`; a user missing from it reads 1 (no usage).
    """
    table = build_table(history, config) if config.policy == "gittins" else None
    keyed = sorted((priority_key(j, now, config, table, fair_share), j) for j in jobs)
    return [decide(i, k, j, now, config, table) for i, (k, j) in enumerate(keyed)]


def decide(
    i: int,
    key: Key,
    job: JobView,
    now: float,
    config: PolicyConfig,
    table: GittinsTable | None,
) -> Decision:
    """The decision for the job at place `i` of the order, whose sort key is `key`."""
    chosen = _chosen(job, config, table)  # the table the job's index reads, and its group
    return Decision(
        job_id=job.job_id,
        rank=i,
        queue=key[1],
        index=_reported_index(job, key, config, table, chosen),
        promoted=uses_queues(config) and starvation_lifts(job, now, config, table),
        guarded=lifted(job, key[2], now, config, table),
        reason=explain(job, key, now, config, table, chosen),
        group=(chosen[1] or "pooled") if chosen else "",
        group_samples=chosen[0].samples if chosen else 0,
    )
