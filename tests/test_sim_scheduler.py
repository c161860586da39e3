"""The Slurm scheduler model ("slurm"): main scheduler, backfill reservations from time
limits, time-limit kills, bf_window, and the other schedulers on hand-built traces."""

import math
import random
from dataclasses import replace

import pytest

from slurm_ext.policy import FreeIndex, PolicyConfig, choose_gpus
from slurm_ext.sim.backfill import BackfillParams, Candidate, Profile, backfill_pass
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.run import simulate
from slurm_ext.sim.traces import TraceJob

FIFO = PolicyConfig(policy="fifo")


def tj(i, gpus, submit, duration, limit=None):
    return TraceJob(
        job_id=i, gpus=gpus, submit_time=submit, duration_s=duration, time_limit_s=limit
    )


def starts(jobs):
    return {j.id: j.first_start for j in jobs}


def run(trace, **cl):
    base = dict(nodes=1, gpus_per_node=4, preemptive=False)
    sim = Simulator(trace, FIFO, SimConfig(**{**base, **cl}))
    return sim, sim.run()


# One 4-GPU node. A (2 GPUs, limit 1000 s) runs from 0; B (4 GPUs) waits for it: Slurm
# reserves the node for B from A's limit, t=1000 (not A's true end, 500).
BLOCKER = [tj(1, 2, 0, 500, limit=1000), tj(2, 4, 1, 100, limit=200)]


def test_reservation_blocks_a_long_candidate_but_lets_a_short_one_through():
    long_c = tj(3, 1, 2, 1000, limit=2000)  # would end (by its limit) after B's reservation
    short_c = tj(4, 1, 3, 50, limit=600)  # ends by t=630 < 1000: backfilled
    sim, jobs = run([*BLOCKER, long_c, short_c])
    s = starts(jobs)
    assert s[4] == 30.0  # the first backfill tick after it arrived
    assert s[1] == 0.0 and s[2] == 500.0  # A ends at 500: the main scheduler starts B
    assert s[3] == 600.0  # after B (500..600): never before the reservation's holder
    # greedy has no reservations: the long candidate starts at once and delays B
    _, jobs = run([*BLOCKER, long_c, short_c], scheduler="greedy")
    g = starts(jobs)
    assert g[3] == 2.0 and g[4] == 3.0 and g[2] == 1002.0


def test_strict_stops_at_the_first_blocked_job():
    _, jobs = run([*BLOCKER, tj(4, 1, 3, 50, limit=600)], scheduler="strict")
    assert starts(jobs) == {1: 0.0, 2: 500.0, 4: 600.0}


def test_a_job_is_killed_at_its_time_limit():
    sim, jobs = run([tj(1, 1, 0, 500, limit=300), tj(2, 1, 0, 100, limit=200)])
    by = {j.id: j for j in jobs}
    assert by[1].finish == 300.0 and by[1].timed_out and by[1].progress == pytest.approx(300.0)
    assert by[2].finish == 100.0 and not by[2].timed_out
    assert sim.timeouts == 1
    # greedy and strict keep today's behaviour: no limits
    sim, jobs = run([tj(1, 1, 0, 500, limit=300)], scheduler="greedy")
    assert jobs[0].finish == 500.0 and sim.timeouts == 0


def test_bf_window_leaves_a_far_reservation_out():
    # B's reservation is at A's limit, t=100000 s: outside a 1-day window no reservation
    # is made, so the long candidate backfills; inside a 2-day window it must wait.
    far = tj(3, 1, 2, 50, limit=150000)
    trace = [tj(1, 2, 0, 500, limit=100000), tj(2, 4, 1, 100, limit=200), far]
    _, jobs = run(trace)
    assert starts(jobs)[3] == 30.0
    _, jobs = run(trace, bf_window_s=2 * 86400)
    assert starts(jobs)[3] == 600.0


def test_bf_max_job_test_caps_the_walk():
    trace = [*BLOCKER, tj(3, 1, 2, 50, limit=600)]
    _, jobs = run(trace, bf_max_job_test=1)  # only B is looked at: nothing backfills
    assert starts(jobs)[3] == 600.0
    _, jobs = run(trace, bf_max_job_test=2)
    assert starts(jobs)[3] == 30.0


def test_bf_interval_sets_the_backfill_ticks():
    _, jobs = run([*BLOCKER, tj(3, 1, 2, 50, limit=600)], bf_interval_s=45)
    assert starts(jobs)[3] == 45.0


def test_reservations_use_limits_rounded_to_bf_resolution():
    # A's limit ends at 1000 s; with a 300 s resolution B's slot starts at 1200 (rounded
    # up): a candidate ending by its limit at 1130 fits before it, not at resolution 60.
    trace = [*BLOCKER, tj(3, 1, 20, 50, limit=1100)]
    _, jobs = run(trace)
    assert starts(jobs)[3] == 600.0
    _, jobs = run(trace, bf_resolution_s=300)
    assert starts(jobs)[3] == 30.0


def test_profile_and_pass_directly():
    # two nodes x 4 GPUs; a 3-GPU job runs on n0 until 100, a 4-GPU job on n1 until 500
    ends = {"n0": [(100.0, 3)], "n1": [(500.0, 4)]}
    p = Profile(0.0, {"n0": 1, "n1": 0}, ends)
    assert p.window_min("n0", 0, 200) == 1 and p.window_min("n0", 100, 200) == 4
    assert p.node_earliest("n0", 4, 50, 1e9) == 100.0
    assert p.node_earliest("n1", 2, 50, 1e9) == 500.0
    reserved = []
    started = backfill_pass(
        0.0,
        [Candidate(7, 4, True, 300.0), Candidate(8, 1, True, 150.0), Candidate(9, 1, True, 50)],
        {"n0": 1, "n1": 0},
        ends.__getitem__,
        4,
        BackfillParams(),
        on_reserve=lambda j, t: reserved.append((j, t)),
    )
    # ends round up to 60 s: 7 gets n0 from t=120; 8 (ends at 180 by its limit) would
    # delay it, 9 (60) does not
    assert reserved[0] == (7, 120.0) and started == [(9, [("n0", 1)])]


def test_run_fills_missing_limits_and_is_seeded():
    trace = [tj(i, 1 + i % 4, i * 10.0, 100.0 + 37 * i) for i in range(40)]
    cl = SimConfig(nodes=2, gpus_per_node=4, seed=3)
    a, _ = simulate(trace, FIFO, cl)
    b, _ = simulate(trace, FIFO, cl)
    c, _ = simulate(trace, FIFO, replace(cl, seed=4))
    assert a["avg_jct_s"] == b["avg_jct_s"]
    assert {"timeouts", "requeues", "lost_work_gpu_s"} <= set(a)
    assert a["jobs"] == c["jobs"] == 40


def test_multi_node_reservation_needs_a_common_window():
    # 8 GPUs on 4-GPU nodes: both nodes whole for 100 s from the same start. n0 is whole
    # from 60 to 200, then reserved; n1 from 180 on: no common window until n0 is free
    # again at 400.
    p = Profile(0.0, {"n0": 0, "n1": 0}, {"n0": [(60.0, 4)], "n1": [(180.0, 4)]})
    p.reserve([("n0", 2)], 200.0, 400.0)
    c = Candidate(1, 8, True, 100.0)
    assert p.earliest(c, 4, 100.0, 1e9) == (400.0, [("n0", 4), ("n1", 4)])
    p.reserve([("n1", 1)], 400.0, 460.0)  # one of its nodes: the cached answer is redone
    assert p.earliest(c, 4, 100.0, 1e9)[0] == 460.0


def _eager_pass(now, cands, free, ends, cap, params):
    """Reference: plan every job in order (no laziness, no early end of the walk)."""
    res = params.resolution_s
    base = math.floor(now / res) * res
    rounded = {n: [(math.ceil(e / res) * res, g) for e, g in ends[n]] for n in free}
    profile = Profile(base, free, rounded)
    free_now, started = dict(free), []
    for c in cands[: params.max_job_test]:
        span = math.ceil(c.limit_s / res) * res
        idx = FreeIndex(cap)
        for n in free:
            if free_now[n] > 0:
                idx.set(n, min(free_now[n], profile.window_min(n, base, base + span)))
        alloc = choose_gpus(idx, c.gpus, c.consolidate)
        if alloc is not None:
            profile.reserve(alloc, base, base + span)
            for n, g in alloc:
                free_now[n] -= g
            started.append((c.job_id, alloc))
            continue
        s, where = profile.earliest(c, cap, span, base + params.window_s)
        if where and s < base + params.window_s:
            profile.reserve(where, s, s + span)
    return started


@pytest.mark.parametrize("seed", range(40))
def test_lazy_pass_starts_what_planning_every_job_starts(seed):
    rng = random.Random(seed)
    cap = rng.choice([4, 8])
    names = [f"n{i}" for i in range(rng.randint(2, 5))]
    free, ends = {}, {}
    for n in names:
        used, ends[n] = 0, []
        while used < cap and rng.random() < 0.8:
            g = rng.randint(1, cap - used)
            ends[n].append((rng.uniform(10, 20000), g))
            used += g
        free[n] = cap - used
    cands = [
        Candidate(
            i,
            rng.choice([1, 1, 2, cap // 2, cap, 2 * cap]),
            rng.random() < 0.8,
            rng.choice([600.0, 3600.0, 14400.0, 86400.0 * 3]),
        )
        for i in range(rng.randint(1, 25))
    ]
    params = BackfillParams(window_s=rng.choice([3600.0, 86400.0]), max_job_test=20)
    lazy = backfill_pass(500.0, cands, free, ends.__getitem__, cap, params)
    assert lazy == _eager_pass(500.0, cands, free, ends, cap, params)
