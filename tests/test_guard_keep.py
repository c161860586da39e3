"""A job the wait guard started keeps the guard's rank for part of its stint
(`wait_guard_keep`), in the service and the simulator alike.

The snapshot (issue 13's requeue thrash, docs/benchmarks.md): a 4-GPU job waited past
the wait guard and started on the whole node; a 2-GPU job submitted after it then
passes the guard too. Judged by its index alone once running, the wide job ranks below
the guarded waiting job and is requeued for it; with the keep it stays.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.policy import PolicyConfig, rank, starts_promoted
from slurm_ext.service.fold import fold
from slurm_ext.service.steps import job_view, preemption_victims
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

# completed jobs' GPU-seconds: the index at 0 attained is ~5e-5, a predicted run of
# ~19,950 GPU-s (4,988 s on 4 GPUs, 9,976 s on 2)
HISTORY = [1000.0 * (i + 1) for i in range(40)]
WIDE, NARROW = 1, 2
WIDE_START, NOW = 6000.0, 10100.0  # wide guarded from 4,998 s, narrow from 10,076 s


def _cfg(keep: float) -> PolicyConfig:
    return PolicyConfig(
        gittins_kinds=[],
        gittins_classes="pooled",
        gittins_time_limit=False,
        gittins_index="quantum",
        wait_guard_factor=1.0,
        wait_guard_keep=keep,
        queue_thresholds_gpu_s=[1e7],  # one queue for this test: the flip alone
    )


def _trace() -> list[TraceJob]:
    return [
        TraceJob(job_id=WIDE, gpus=4, submit_time=10.0, duration_s=1e6, checkpoint=True),
        TraceJob(job_id=NARROW, gpus=2, submit_time=100.0, duration_s=1e6, checkpoint=True),
    ]


def _slurm_job(t: TraceJob, running: bool) -> Job:
    if not running:
        return Job(job_id=t.job_id, state=JobState.PENDING, gpus=t.gpus, submit_time=t.submit_time)
    return Job(
        job_id=t.job_id,
        state=JobState.RUNNING,
        gpus=t.gpus,
        submit_time=t.submit_time,
        start_time=WIDE_START,
        nodes=("n0",),
        requeue=True,
        comment="checkpoint=1",
    )


def rank_at_now(cfg: PolicyConfig, composed: bool = False) -> list:
    """The service's decisions at NOW (the wide job marked as a guard's start)."""
    trace = _trace()
    jobs = [_slurm_job(trace[0], True), _slurm_job(trace[1], False)]
    records = fold({}, [_slurm_job(t, False) for t in trace], WIDE_START - 1.0).records
    records = fold(records, jobs, NOW, {WIDE}).records
    views = [job_view(j, records[j.job_id], NOW) for j in jobs]
    return rank(views, NOW, cfg, HISTORY)


def service_decides(cfg: PolicyConfig) -> tuple[list[int], list[int], bool]:
    """The service's pure steps: the pass before the wide job starts (which guard lifts
    it), the fold that sees it running, then the order and the victims at NOW."""
    trace = _trace()
    pending = [_slurm_job(t, False) for t in trace]
    before = WIDE_START - 1.0
    records = fold({}, pending, before).records
    views = [job_view(j, records[j.job_id], before) for j in pending]
    promoted = starts_promoted(rank(views, before, cfg, HISTORY), cfg)
    jobs = [_slurm_job(trace[0], True), pending[1]]
    records = fold(records, jobs, WIDE_START + 1.0, promoted).records
    records = fold(records, jobs, NOW, promoted).records
    decisions = rank([job_view(j, records[j.job_id], NOW) for j in jobs], NOW, cfg, HISTORY)
    nodes = [Node(name="n0", gpus=4, gpus_alloc=4, state="ALLOCATED")]
    by_id = {j.job_id: j for j in jobs}
    top, victims = preemption_victims(decisions, by_id, nodes, set(), NOW, cfg, "consolidate")
    assert top == NARROW
    kept = records[WIDE].promoted_at_gpu_s is not None
    return [d.job_id for d in decisions], victims, kept


def simulator_decides(cfg: PolicyConfig) -> tuple[list[int], list[int]]:
    """The same moment in the simulator: its order, and whom it requeues for the
    narrow job."""
    cl = SimConfig(nodes=1, gpus_per_node=4, checkpoint_interval_s=900.0, history=HISTORY)
    sim = Simulator(_trace(), cfg, cl)
    wide, narrow = sim.by_id[WIDE], sim.by_id[NARROW]
    sim._rekey(wide, WIDE_START)
    sim._rekey(narrow, WIDE_START)
    sim._start(wide, [("n0", 4)], WIDE_START)
    for job in sim.jobs:
        sim._rekey(job, NOW)
    order = sim.order()
    sim.preemption.make_room(narrow, NOW)
    return order, [j.id for j in sim.jobs if j.preemptions]


def test_without_the_keep_the_just_started_guarded_job_is_requeued():
    cfg = _cfg(0.0)
    order, victims, kept = service_decides(cfg)
    assert order == [NARROW, WIDE] and victims == [WIDE] and not kept
    assert simulator_decides(cfg) == (order, victims)


@pytest.mark.parametrize("keep", [1.0, 3.0])
def test_with_the_keep_it_stays_in_both_shells(keep):
    cfg = _cfg(keep)
    order, victims, kept = service_decides(cfg)
    assert kept and order == [WIDE, NARROW] and victims == []
    assert simulator_decides(cfg) == (order, victims)
    # the explanation says why it ranks first
    wide = next(d for d in rank_at_now(cfg) if d.job_id == WIDE)
    assert "started under a guard" in wide.reason


def test_the_keep_ends_after_its_share_of_the_predicted_run():
    # 0.5 x 4,988 s: over by NOW (4,100 s into the stint), so the flip is back
    cfg = _cfg(0.5)
    order, victims, kept = service_decides(cfg)
    assert kept and order == [NARROW, WIDE] and victims == [WIDE]
    assert simulator_decides(cfg) == (order, victims)


def test_guarded_flag_survives_the_fair_share_composition():
    # composed with Slurm's fair-share the guard is a site factor, not the GUARDED score:
    # the decision still says the job is guarded, so its stint is marked
    cfg = replace(_cfg(1.0), fairshare_site_weight=1000.0)
    flags = {d.job_id: d.guarded for d in rank_at_now(cfg)}
    assert flags == {WIDE: False, NARROW: True}  # running: not lifted now
    assert starts_promoted(rank_at_now(cfg), cfg) == {NARROW}
    assert starts_promoted(rank_at_now(cfg), replace(cfg, wait_guard_keep=0.0)) == set()


def test_wait_guard_keep_must_be_a_non_negative_number():
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="wait_guard_keep"):
            PolicyConfig(wait_guard_keep=bad)
