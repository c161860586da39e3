"""The starvation guard as the wait guard's backstop, in the policy, the service's
promoted flag and the simulator's stint marking alike.

A requeued job whose Gittins index the wait guard can scale is left to the wait guard;
Tiresias' STARVELIMIT (waited >= starvation_factor x last stint -> queue 0, a fresh
quantum, and with wait_guard_keep the guard's rank for the stint it starts) lifts only a
job the wait guard cannot judge: index 0 (it outlived every completion in its table), no
history, or the wait guard off. (Tiresias' rule, both guards on every requeued job,
was the `starvation_scope = "all"` setting, since removed.)
"""

from __future__ import annotations

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import JobView
from slurm_ext.policy import PolicyConfig, rank, starts_promoted
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

HISTORY = [1000.0 * (i + 1) for i in range(40)]  # completed GPU-seconds, the last 40,000
REQUEUED, FRESH = 1, 2
NOW = 14_000.0  # the requeued job waited 9,000 s >= 2 x its 4,000 s stint


def _cfg(wait_guard_factor: float = 1000.0) -> PolicyConfig:
    # a wait guard far off (1000 x predicted run), so only the starvation guard can lift
    return PolicyConfig(
        gittins_kinds=[],
        gittins_classes="pooled",
        gittins_time_limit=False,
        gittins_index="quantum",
        queue_thresholds_gpu_s=[100.0],
        starvation_factor=2.0,
        wait_guard_factor=wait_guard_factor,
        min_run_s=0.0,
    )


def _views(attained: float) -> list[JobView]:
    requeued = JobView(
        job_id=REQUEUED,
        gpus=1,
        submit_time=0.0,
        attained_gpu_s=attained,
        executed_s=attained,
        last_run_s=4000.0,
        waiting_since=5000.0,
    )
    return [requeued, JobView(job_id=FRESH, gpus=1, submit_time=12_000.0)]


def service(cfg: PolicyConfig, attained: float) -> tuple[list[int], set[int]]:
    """The service's order at NOW and the stints its next fold marks as a guard's."""
    decisions = rank(_views(attained), NOW, cfg, HISTORY)
    return [d.job_id for d in decisions], starts_promoted(decisions, cfg)


def simulator(cfg: PolicyConfig, attained: float) -> tuple[list[int], set[int]]:
    """The same moment in the simulator: its order, and whether starting the requeued
    job marks the stint (the engine's `_start`)."""
    trace = [
        TraceJob(job_id=REQUEUED, gpus=1, submit_time=0.0, duration_s=1e6, checkpoint=True),
        TraceJob(job_id=FRESH, gpus=1, submit_time=12_000.0, duration_s=1e6, checkpoint=True),
    ]
    sim = Simulator(trace, cfg, SimConfig(nodes=1, gpus_per_node=4, history=HISTORY))
    job = sim.by_id[REQUEUED]
    job.attained, job.executed, job.last_run, job.waiting_since = attained, attained, 4000.0, 5000.0
    for j in sim.jobs:
        sim._rekey(j, NOW)
    order = sim.order()
    sim._start(job, [("n0", 1)], NOW)
    return order, {REQUEUED} if job.promoted_at is not None else set()


def test_backstop_leaves_a_job_the_wait_guard_can_judge_to_the_wait_guard():
    cfg = _cfg()
    order, marked = service(cfg, 4000.0)
    # not lifted: its attained service keeps it in queue 1, behind the fresh job
    assert order == [FRESH, REQUEUED] and marked == set()
    d = next(x for x in rank(_views(4000.0), NOW, cfg, HISTORY) if x.job_id == REQUEUED)
    assert not d.promoted and d.queue == 1 and "promoted" not in d.reason
    assert simulator(cfg, 4000.0) == (order, marked)


def test_backstop_still_lifts_a_job_that_outlived_its_history():
    # 70,000 GPU-s attained, past every completion (and grid cell): index 0, the wait guard never lifts it
    # (lifted to queue 0, where its index 0 still ranks it behind the fresh job: the
    # queue is what the starvation guard changes)
    cfg = _cfg()
    order, marked = service(cfg, 70_000.0)
    assert marked == {REQUEUED}
    d = next(x for x in rank(_views(70_000.0), NOW, cfg, HISTORY) if x.job_id == REQUEUED)
    assert d.promoted and d.queue == 0 and "promoted to queue 0" in d.reason
    assert simulator(cfg, 70_000.0) == (order, marked)
    # before its starvation limit it is not lifted
    early = next(x for x in rank(_views(70_000.0), 12_000.0, cfg, HISTORY) if x.job_id == 1)
    assert not early.promoted and early.queue == 1


def test_without_the_wait_guard_the_starvation_guard_covers_every_requeued_job():
    cfg = _cfg(wait_guard_factor=0.0)
    order, marked = service(cfg, 4000.0)
    assert order == [REQUEUED, FRESH] and marked == {REQUEUED}
    d = rank(_views(4000.0), NOW, cfg, HISTORY)[0]
    assert d.promoted and d.queue == 0
    assert "promoted to queue 0: waited 9000 s >= 2 x last run 4000 s" in d.reason
    assert simulator(cfg, 4000.0) == (order, marked)


def test_without_history_the_starvation_guard_covers_every_requeued_job():
    decisions = rank(_views(4000.0), NOW, _cfg())  # 2D-LAS, no index
    assert [d.job_id for d in decisions] == [REQUEUED, FRESH] and decisions[0].promoted


def test_the_removed_starvation_scope_is_refused_saying_what_replaced_it():
    with pytest.raises(ConfigError, match='starvation_scope: removed.*as "backstop" did'):
        from_dict(PolicyConfig, {"starvation_scope": "all"}, None)
