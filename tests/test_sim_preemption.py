"""The one preemption rule (`policy.preemption.choose_victims`): hand-built cases, the
service and the simulator picking the same jobs on random snapshots, the simulator's
clearing tables against the rule, and the costs of preemption in the simulator."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.policy import (
    PolicyConfig,
    RunningJob,
    WaitingJob,
    choose_gpus,
    choose_victims,
    rank,
    requeue_cost_gpu_s,
)
from slurm_ext.service.steps import _per_node, preemption_victims
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.traces import TraceJob


def rj(job_id, alloc, ok=True, ran=1000.0, pinned=False):
    return RunningJob(job_id, tuple(alloc), ok, ran, pinned)


def test_worst_first_only_as_many_as_needed_and_only_eligible():
    free = {"n0": 0, "n1": 0}
    below = [  # worst first
        rj(1, [("n0", 1)], ok=False),  # not opted in
        rj(2, [("n0", 1)], pinned=True),
        rj(3, [("n1", 1)], ran=10.0),  # within min_run_s
        rj(4, [("n1", 2)]),
        rj(5, [("n0", 2)]),
        rj(6, [("n0", 1)]),
    ]
    spread = WaitingJob(9, 3, consolidate=False)
    assert choose_victims(spread, below, free, 4, min_run_s=60) == [4, 5]
    # a victim whose GPUs turn out not to be needed keeps running: taking 4 (2 GPUs),
    # then 5 (2) frees 4 for a 2-GPU job... 4 alone suffices
    assert choose_victims(WaitingJob(9, 2, False), below, free, 4, min_run_s=60) == [4]
    assert choose_victims(WaitingJob(9, 9, False), below, free, 4, min_run_s=60) == []
    assert choose_victims(WaitingJob(9, 1, False), below, {"n0": 1, "n1": 0}, 4) == []


def test_consolidated_job_clears_the_node_of_the_lowest_ranked_jobs():
    # 2 nodes x 4 GPUs; n0: 1 free, job 2 (1 GPU) and 2 GPUs of a job ranked above
    free = {"n0": 1, "n1": 0}
    below = [rj(1, [("n1", 1)]), rj(2, [("n0", 1)]), rj(3, [("n1", 3)])]
    # for 2 GPUs n0 needs job 2 gone, n1 needs jobs 1 and 3 (3 ranks above 2): n0 is
    # cleared, and only job 2 goes
    assert choose_victims(WaitingJob(9, 2, True), below, free, 4) == [2]
    # a 4-GPU job needs a whole node: n1 (jobs 1 and 3) or n0 (2 plus a job not below)
    assert choose_victims(WaitingJob(9, 4, True), below, free, 4) == [1, 3]
    # two whole nodes: impossible while n0 holds a job that is not below the waiting one
    assert choose_victims(WaitingJob(9, 8, True), below, free, 4) == []


def test_requeue_cost_and_preemption_cap_keep_jobs_running():
    free = {"n0": 0}
    # job 1: 300 s of work since its last checkpoint + 30 s restart, 2 GPUs = 660 GPU-s
    costly = RunningJob(1, (("n0", 2),), True, 1200.0, lost_gpu_s=660.0)
    cheap = RunningJob(2, (("n0", 2),), True, 1200.0, lost_gpu_s=60.0)
    w = WaitingJob(9, 2, False, gain_gpu_s=600.0)  # it has waited 300 s on 2 GPUs
    assert choose_victims(w, [costly, cheap], free, 4) == [2]
    assert choose_victims(w, [costly], free, 4) == []  # would lose more than it gains
    assert choose_victims(WaitingJob(9, 2, False, gain_gpu_s=660.0), [costly], free, 4) == [1]
    assert choose_victims(WaitingJob(9, 2, False), [costly], free, 4) == [1]  # not costed
    tired = RunningJob(3, (("n0", 2),), True, 1200.0, preemptions=5)
    assert choose_victims(WaitingJob(9, 2, False), [tired], free, 4, max_preemptions=5) == []
    assert choose_victims(WaitingJob(9, 2, False), [tired], free, 4, max_preemptions=6) == [3]
    assert choose_victims(WaitingJob(9, 2, True), [tired, cheap], free, 4, max_preemptions=5) == [2]
    assert requeue_cost_gpu_s(2, 1000.0, 900.0, 30.0) == pytest.approx(2 * (100 + 30))
    assert requeue_cost_gpu_s(2, 1000.0, 0.0, 30.0) == pytest.approx(60.0)


def test_preemption_cap_bounds_requeues_of_a_whole_run():
    trace = synth_jobs(600, 32, load=1.2, seed=4)
    cl = SimConfig(nodes=4, gpus_per_node=8)
    free_run = Simulator(trace, PolicyConfig(min_run_s=0, max_preemptions=0), cl)
    assert max(j.preemptions for j in free_run.run()) > 3  # the cap has work to do
    capped = Simulator(trace, PolicyConfig(min_run_s=0, max_preemptions=3), cl)
    jobs = capped.run()
    assert max(j.preemptions for j in jobs) == 3 and capped.preemptions > 0
    assert all(j.finish is not None for j in jobs)


def test_requeue_cost_lowers_lost_work():
    trace = synth_jobs(600, 32, load=1.2, seed=4)
    cl = SimConfig(nodes=4, gpus_per_node=8, checkpoint_interval_s=900.0)
    plain = Simulator(trace, PolicyConfig(preemption_cost=False), cl)
    plain.run()
    costed = Simulator(trace, PolicyConfig(preemption_cost=True), cl)
    costed.run()
    assert plain.lost_work_gpu_s > 0
    assert costed.lost_work_gpu_s < plain.lost_work_gpu_s


def _snapshot(seed: int):
    """A random simulator state at t=1000 and the same state as the service sees it."""
    rng = random.Random(seed)
    gpn = rng.choice([4, 8])
    placement = rng.choice(["consolidate", "spread"])
    all_ok = rng.random() < 0.5
    trace = [
        TraceJob(
            job_id=i + 1,
            gpus=rng.choice([1, 1, 2, 3, gpn // 2, gpn, 2 * gpn]),
            submit_time=round(rng.uniform(0, 400), 1),
            duration_s=1e6,
            model_tag=rng.choice(["resnet50", "vgg16"]),
            checkpoint=all_ok or rng.random() < 0.7,
        )
        for i in range(rng.randint(4, 16))
    ]
    cfg = PolicyConfig(
        policy=rng.choice(["las", "fifo"]),
        queue_thresholds_gpu_s=[rng.choice([200.0, 2000.0])],
        min_run_s=rng.choice([0.0, 300.0]),
        starvation_factor=0,
        max_preemptions=rng.choice([0, 0, 1, 2]),
        preemption_cost=rng.random() < 0.5,
        preemption_checkpoint_s=rng.choice([0.0, 120.0, 900.0]),
    )
    cl = SimConfig(
        nodes=rng.randint(2, 5),
        gpus_per_node=gpn,
        placement=placement,
        checkpoint_interval_s=cfg.preemption_checkpoint_s,
        restart_overhead_s=cfg.preemption_restart_s,
    )
    sim = Simulator([t for t in trace if t.gpus <= cl.nodes * gpn], cfg, cl)
    for job in sim.jobs:  # earlier requeues (the service reads Slurm's restart count)
        job.preemptions = rng.choice([0, 0, 1, 2, 3])
    now = 1000.0
    starts = sorted((rng.uniform(j.submit, now - 1), j) for j in sim.jobs if rng.random() < 0.7)
    for t, job in starts:
        alloc = choose_gpus(sim.cluster.idx, job.gpus, job.must_consolidate)
        if alloc is None or _per_node(_service_job(job, alloc, t, True)) != alloc:
            continue  # no room, or a split the service's Job cannot express
        sim._start(job, alloc, t)
    for job in sim.jobs:
        sim._rekey(job, now)
    jobs = {
        j.id: _service_job(j, j.alloc, j.start, j.preemptible) if j.running else _pending(j)
        for j in sim.jobs
    }
    nodes = [
        Node(name=n, gpus=gpn, gpus_alloc=gpn - f, state="MIXED")
        for n, f in sim.cluster.idx.free.items()
    ]
    return sim, cfg, placement, jobs, nodes, now


def _service_job(j, alloc, start, ok):
    flag = "checkpoint=1" if ok else "checkpoint=0"
    return Job(
        job_id=j.id,
        state=JobState.RUNNING,
        gpus=j.gpus,
        submit_time=j.submit,
        start_time=start,
        nodes=tuple(n for n, _ in alloc),
        requeue=True,
        comment=f"model={j.model} {flag}",
        restart_count=j.preemptions,
    )


def _pending(j):
    return Job(
        job_id=j.id,
        state=JobState.PENDING,
        gpus=j.gpus,
        submit_time=j.submit,
        comment=f"model={j.model}",
    )


@pytest.mark.parametrize("seed", range(60))
def test_service_and_simulator_pick_the_same_victims(seed):
    sim, cfg, placement, jobs, nodes, now = _snapshot(seed)
    decisions = rank(sim.views(now), now, cfg)
    assert [d.job_id for d in decisions] == sim.order()
    top, victims = preemption_victims(decisions, jobs, nodes, set(), now, cfg, placement)
    pending = [i for i in sim.order() if not sim.by_id[i].running]
    if not pending:
        assert top is None and victims == []
        return
    job = sim.by_id[pending[0]]
    assert top == job.id
    if choose_gpus(sim.cluster.idx, job.gpus, job.must_consolidate) is not None:
        assert victims == []
        return
    before = {j.id: j.preemptions for j in sim.jobs}
    sim.preemption.verify_victims = True  # the clearing tables, when used, must agree with the rule
    sim.preemption.make_room(job, now)
    preempted = sorted(j.id for j in sim.jobs if j.preemptions > before[j.id])
    assert sorted(victims) == preempted


@pytest.mark.parametrize("policy", ["las", "gittins"])
def test_clearing_tables_pick_what_the_rule_picks(policy):
    """Whole runs: every clearing by the tables is checked against choose_victims."""
    trace = synth_jobs(600, 32, load=1.2, seed=4)
    cfg = PolicyConfig(policy=policy, preemption_cost=False, max_preemptions=0)  # tables on
    sim = Simulator(trace, cfg, SimConfig(nodes=4, gpus_per_node=8))
    sim.preemption.verify_victims = True
    sim.run()
    assert sim.preemptions > 0


# Preemption costs. One 1-GPU node; LAS, one queue threshold at 50 GPU-s: A (1000 s of
# work) runs from 0, drops to queue 1 at t=50 and B (queue 0) preempts it.
TWO = [
    TraceJob(job_id=1, gpus=1, submit_time=0, duration_s=1000),
    TraceJob(job_id=2, gpus=1, submit_time=10, duration_s=40),
]
LAS = PolicyConfig(policy="las", queue_thresholds_gpu_s=[50.0], min_run_s=0)


def _run(trace=TWO, **cl):
    sim = Simulator(trace, LAS, SimConfig(nodes=1, gpus_per_node=1, restart_overhead_s=5, **cl))
    return sim, {j.id: j for j in sim.run()}


def test_checkpoint_interval_loses_the_work_since_the_last_checkpoint():
    sim, jobs = _run()
    assert jobs[1].finish == pytest.approx(1045.0) and sim.lost_work_gpu_s == 0
    # checkpoints every 30 s of work: preempted at 50, it resumes from 30 (20 s lost)
    sim, jobs = _run(checkpoint_interval_s=30.0)
    assert sim.lost_work_gpu_s == pytest.approx(20.0)
    assert jobs[1].finish == pytest.approx(90 + 5 + 970)


def test_only_preemptible_jobs_are_preempted():
    sim, jobs = _run(preemptible_fraction=0.0)
    assert sim.preemptions == 0 and jobs[2].first_start == 1000.0
    flagged = [TWO[0].__class__(**{**TWO[0].__dict__, "checkpoint": True}), TWO[1]]
    sim, _ = _run(flagged)  # the trace's flags: A opted in
    assert sim.preemptions == 1
    sim, _ = _run([TWO[0], TraceJob(**{**TWO[1].__dict__, "checkpoint": True})])
    assert sim.preemptions == 0  # only B opted in: A may not be preempted
    draws = Simulator(synth_jobs(400, 8, seed=1), LAS, SimConfig(preemptible_fraction=0.3))
    share = sum(j.preemptible for j in draws.jobs) / 400
    assert 0.22 < share < 0.38


def test_pass_interval_delays_the_policy_to_its_ticks():
    # A's key drops at t=50; with a 120 s pass interval the policy sees it at t=120
    sim, jobs = _run(pass_interval_s=120.0)
    assert jobs[2].first_start == pytest.approx(120.0) and sim.preemptions == 1
    assert jobs[1].finish == pytest.approx(160 + 5 + 880)


def test_requeue_delay_holds_a_preempted_job_and_counts_in_the_cost_rule():
    """Slurm keeps a requeued job ineligible for cred_expire + 1 s: the simulator's
    `requeue_delay_s`. A, preempted at 50, may start again only at 150 though B ends at
    90 and the GPU is free; and the cost rule counts the delay as lost time."""
    free_rule = replace(LAS, preemption_cost=False)
    cl = SimConfig(nodes=1, gpus_per_node=1, restart_overhead_s=5, requeue_delay_s=100.0)
    sim = Simulator(TWO, free_rule, cl)
    jobs = {j.id: j for j in sim.run()}
    assert sim.preemptions == 1 and jobs[2].finish == pytest.approx(90.0)
    assert jobs[1].finish == pytest.approx(150 + 5 + 950)
    # with the cost rule: requeueing A at 50 loses 105 GPU-s (restart 5 + hold 100), more
    # than B has waited (40): B waits for A instead
    sim = Simulator(TWO, LAS, cl)
    jobs = {j.id: j for j in sim.run()}
    assert sim.preemptions == 0 and jobs[2].first_start == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="requeue_delay_s"):
        SimConfig(requeue_delay_s=-1.0)


def test_one_preemption_per_pass_as_the_service_does():
    """The service requeues for its best waiting job once per pass; the simulator does so
    for every blocked job of a pass unless `one_preemption_per_pass`. Two long jobs hold
    a 2-GPU node; two short ones arrive at 10 and outrank them from t=50 on."""
    trace = [
        TraceJob(job_id=1, gpus=1, submit_time=0, duration_s=1000),
        TraceJob(job_id=2, gpus=1, submit_time=0, duration_s=1000),
        TraceJob(job_id=3, gpus=1, submit_time=10, duration_s=20),
        TraceJob(job_id=4, gpus=1, submit_time=10, duration_s=20),
    ]
    free_rule = replace(LAS, preemption_cost=False)

    def run(one: bool) -> tuple[list[float], int]:
        cl = SimConfig(nodes=1, gpus_per_node=2, pass_interval_s=100.0)
        cl = replace(cl, restart_overhead_s=0.0, one_preemption_per_pass=one)
        sim = Simulator(trace, free_rule, cl)
        jobs = {j.id: j for j in sim.run()}
        return sorted([jobs[3].first_start, jobs[4].first_start]), sim.preemptions

    assert run(False) == ([100.0, 100.0], 2)
    # one requeue at the tick of 100; the other short job takes its GPU when it ends
    assert run(True) == ([100.0, 120.0], 1)


def test_max_requeues_per_pass_caps_the_victims_as_the_service_does():
    """A 4-GPU job needs all four 1-GPU jobs of its node gone; with the service's cap of
    2 requeues per pass, two go at the tick of 100 (worst first) and two at 200."""
    trace = [TraceJob(job_id=i, gpus=1, submit_time=0, duration_s=1000) for i in range(4)]
    trace.append(TraceJob(job_id=9, gpus=4, submit_time=10, duration_s=20))
    free_rule = replace(LAS, preemption_cost=False)

    def run(cap: int) -> tuple[float, int]:
        cl = SimConfig(nodes=1, gpus_per_node=4, pass_interval_s=100.0, scheduler="strict")
        cl = replace(cl, restart_overhead_s=0.0, max_requeues_per_pass=cap)
        sim = Simulator(trace, free_rule, cl)
        jobs = {j.id: j for j in sim.run()}
        return jobs[9].first_start, sim.preemptions

    assert run(0) == (100.0, 4)
    assert run(2) == (200.0, 4)
    with pytest.raises(ValueError, match="max_requeues_per_pass"):
        SimConfig(max_requeues_per_pass=-1)
