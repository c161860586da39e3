"""The simulator's optional CPU dimension: hand-computed schedules and the off switch."""

import random
from dataclasses import replace

import pytest

from slurm_ext.policy import FreeIndex, PolicyConfig, choose_gpus, cpu_limited
from slurm_ext.sim.cpus import cpu_speed, even_share
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.traces import TraceJob

FIFO = PolicyConfig(policy="fifo")


def finish_times(jobs):
    return {j.id: j.finish for j in jobs}


def job(i, gpus=1, submit=0.0, duration=1000.0, model=None, cpus=None):
    return TraceJob(i, gpus, submit, duration, model_tag=model, cpus_per_gpu=cpus)


def test_speed_curve():
    knees = {"vgg16": 12.0}
    assert cpu_speed("vgg16", 6, knees) == 0.5
    assert cpu_speed("vgg16", 24, knees) == 1.0
    assert cpu_speed("bert", 1, knees) == 1.0  # no curve: never starved
    assert cpu_speed(None, 1, knees) == 1.0
    assert even_share(40, 4) == 10


@pytest.mark.parametrize(
    ("model", "cpus", "expected"),
    [
        ("vgg16", 6, 2000.0),  # knee 12: half speed, 1000 s of work take 2000 s
        ("overfeat", 10, 4000.0),  # knee 40: quarter speed
        ("resnet50", 10, 1000.0),  # past its knee of 7: full speed
        ("resnet50", None, 1000.0),  # even share 40 / 4 = 10 cores per GPU
        ("bert", 1, 1000.0),  # no curve
    ],
)
def test_a_starved_job_stretches_by_knee_over_cores(model, cpus, expected):
    cl = SimConfig(nodes=1, gpus_per_node=4, cpus_per_node=40)
    sim = Simulator([job(1, 2, model=model, cpus=cpus)], FIFO, cl)
    (j,) = sim.run()
    assert j.finish == pytest.approx(expected)
    assert j.attained == pytest.approx(2 * expected)  # both GPUs held the whole time


def test_knees_are_configurable():
    cl = SimConfig(nodes=1, gpus_per_node=4, cpus_per_node=40, cpu_knees={"vgg16": 20.0})
    (j,) = Simulator([job(1, model="vgg16", cpus=10)], FIFO, cl).run()
    assert j.finish == pytest.approx(2000.0)


def test_a_job_waits_for_cores_although_gpus_are_free():
    # A takes 1 GPU and 32 of 40 cores (overfeat: 32/40 speed, ends at 1250); B needs
    # 10 cores: 3 GPUs but only 8 cores are free, so it waits until A ends.
    trace = [
        job(1, model="overfeat", cpus=32),
        job(2, submit=10.0, duration=100.0, cpus=10),
    ]
    cl = SimConfig(nodes=1, gpus_per_node=4, cpus_per_node=40)
    assert finish_times(Simulator(trace, FIFO, cl).run()) == pytest.approx({1: 1250.0, 2: 1350.0})
    # GPUs only: B starts at once
    gpus_only = replace(cl, cpus_per_node=None)
    assert finish_times(Simulator(trace, FIFO, gpus_only).run()) == pytest.approx(
        {1: 1000.0, 2: 110.0}
    )
    # a second node: B goes there rather than to the best GPU fit it cannot feed
    two = replace(cl, nodes=2)
    starts = {}

    def record(sim, now):
        for j in sim.jobs:
            if j.running:
                starts.setdefault(j.id, (now, list(j.alloc)))

    Simulator(trace, FIFO, two, on_pass=record).run()
    assert starts == {1: (0.0, [("n0", 1)]), 2: (10.0, [("n1", 1)])}


def test_backfill_passes_a_job_blocked_by_cores_alone():
    # A holds 20 of 40 cores. B (same GPU count) needs 40 and must wait; C needs 10 and
    # backfills at once. Jobs with equal GPUs but different cores are not one bucket.
    trace = [
        job(1, cpus=20),
        job(2, submit=1.0, duration=100.0, cpus=40),
        job(3, submit=2.0, duration=50.0, cpus=10),
    ]
    cl = SimConfig(nodes=1, gpus_per_node=4, cpus_per_node=40, scheduler="greedy")
    assert finish_times(Simulator(trace, FIFO, cl).run()) == {1: 1000.0, 2: 1100.0, 3: 52.0}
    strict = replace(cl, scheduler="strict")  # C waits behind B, then for B's cores
    assert finish_times(Simulator(trace, FIFO, strict).run()) == {
        1: 1000.0,
        2: 1100.0,
        3: 1150.0,
    }


def test_placement_sees_only_the_gpus_cores_can_feed():
    idx = FreeIndex(4)
    idx.set("a", 3)
    idx.set("b", 4)
    cpus = {"a": 8, "b": 40}
    assert choose_gpus(idx, 1, True) == [("a", 1)]  # best fit on GPUs alone
    assert choose_gpus(idx, 1, True, (cpus, 10)) == [("b", 1)]
    assert choose_gpus(idx, 1, True, (cpus, 8)) == [("a", 1)]  # 8 cores feed one GPU
    assert choose_gpus(idx, 4, True, ({"a": 40, "b": 30}, 10)) is None
    assert cpu_limited(idx, cpus, 4).free == {"a": 2, "b": 4}


@pytest.mark.parametrize("placement", ["consolidate", "spread"])
def test_preemption_releases_cores(placement):
    # A holds 1 of 2 GPUs and all 20 cores. B (10 cores) cannot start on the free GPU.
    # LAS: A reaches 50 GPU-s at t=50, drops a queue, and B preempts it for its cores
    # (consolidate: node clearing; spread: the general victim search). B runs 50..90,
    # A restarts at 90, pays 5 s, has 950 s left -> 1045. Same numbers as GPU-only LAS
    # on a one-GPU node.
    trace = [job(1, cpus=20), job(2, submit=10.0, duration=40.0, cpus=10)]
    cl = SimConfig(
        nodes=1, gpus_per_node=2, cpus_per_node=20, restart_overhead_s=5, placement=placement
    )
    las = PolicyConfig(policy="las", queue_thresholds_gpu_s=[50.0], min_run_s=0)
    sim = Simulator(trace, las, cl)
    assert finish_times(sim.run()) == pytest.approx({1: 1045.0, 2: 90.0})
    assert sim.preemptions == 1
    assert sim.cluster.free_cpus == {"n0": 20}
    # without the CPU dimension the free GPU is enough: no preemption
    gpus_only = Simulator(trace, las, replace(cl, cpus_per_node=None))
    assert finish_times(gpus_only.run()) == pytest.approx({1: 1000.0, 2: 50.0})
    assert gpus_only.preemptions == 0


@pytest.mark.parametrize("placement", ["consolidate", "profile"])
def test_cores_are_accounted_through_preemptions(placement):
    """After every pass: free cores = capacity - cores of the jobs running there, >= 0."""
    rng = random.Random(4)
    trace = [
        replace(t, gpus=min(t.gpus, 4), cpus_per_gpu=rng.choice([None, 2, 6, 12]))
        for t in synth_jobs(300, 32, load=1.2, seed=4)
    ]
    cl = SimConfig(nodes=4, gpus_per_node=8, cpus_per_node=48, placement=placement)
    seen = {"passes": 0}

    def check(sim, now):
        seen["passes"] += 1
        used = dict.fromkeys(sim.cluster.free_cpus, 0)
        for j in sim.jobs:
            if j.running:
                for n, g in j.alloc:
                    used[n] += g * j.cpus_per_gpu
        assert all(sim.cluster.free_cpus[n] == 48 - used[n] >= 0 for n in used), now

    sim = Simulator(trace, PolicyConfig(policy="gittins"), cl, on_pass=check)
    jobs = sim.run()
    assert sim.preemptions > 0 and seen["passes"] > 0
    assert sim.cluster.free_cpus == dict.fromkeys(sim.cluster.free_cpus, 48)
    assert all(j.finish is not None for j in jobs)
    gpus_only = Simulator(trace, PolicyConfig(policy="gittins"), replace(cl, cpus_per_node=None))
    assert finish_times(gpus_only.run()) != finish_times(jobs)  # cores did bind


def test_cpu_dimension_off_changes_nothing():
    trace = synth_jobs(400, 32, load=1.1, seed=7)
    gittins = PolicyConfig(policy="gittins")

    def run(**kw):
        sim = Simulator(trace, gittins, SimConfig(nodes=4, gpus_per_node=8, **kw))
        jobs = sim.run()
        return [(j.id, j.finish, j.attained, j.stints) for j in jobs], sim.preemptions, sim.seq

    base = run()
    assert base[1] > 0  # preemptions happened: the comparison covers them
    assert run(cpus_per_node=None) == base
    assert run(cpus_per_node=0) == base
    # the CPU code path with cores to spare and no speed curves schedules exactly alike
    assert run(cpus_per_node=10**6, cpu_knees={}) == base
    # but starved jobs do change the schedule
    assert run(cpus_per_node=16)[0] != base[0]


def test_cpu_requests_are_ignored_when_off():
    # overfeat at 1 core per GPU would run at 1/40 speed; with CPUs off it does not
    trace = [job(1, 4, model="overfeat", cpus=1), job(2, 1, submit=5.0, duration=20.0, cpus=1)]
    sim = Simulator(trace, FIFO, SimConfig(nodes=1, gpus_per_node=4))
    assert finish_times(sim.run()) == {1: 1000.0, 2: 1020.0}
    assert sim.cluster.free_cpus is None


def test_a_job_that_cannot_get_its_cores_is_an_error():
    cl = SimConfig(nodes=2, gpus_per_node=4, cpus_per_node=40)
    with pytest.raises(ValueError, match="needs 60 cores on a node"):
        Simulator([job(1, 4, cpus=15)], FIFO, cl)
    # spread jobs need only one GPU's cores on a node
    Simulator([job(1, 4, cpus=15)], FIFO, replace(cl, placement="spread"))
