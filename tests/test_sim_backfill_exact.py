"""The fast backfill pass decides exactly what a straightforward planner decides.

The pass keeps per-node steps across passes, reads the profile only on nodes a blocked
job's reservation took, answers untouched nodes' earliest starts from a table and caches
earliest starts within a pass. The reference here has none of that: it plans every job
in order, builds its profile from the raw ends, scans every node's window for a start-now
offer and finds single-node earliest starts by trying every step time.
"""

import math
import random
from bisect import bisect_right
from dataclasses import replace

import pytest

from slurm_ext.policy import FreeIndex, PolicyConfig, choose_gpus, min_nodes
from slurm_ext.sim.backfill import (
    INF,
    BackfillParams,
    Candidate,
    Profile,
    backfill_pass,
    node_steps,
)
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits


def _steps_by_hand(base, free, ends):
    """The step function a node's running jobs give: (time, free) pairs from `base`."""
    times, frees = [base], [free + sum(g for e, g in ends if e <= base)]
    for e in sorted({e for e, _ in ends if e > base}):
        times.append(e)
        frees.append(frees[-1] + sum(g for t, g in ends if t == e))
    return times, frees


def _ref_earliest(p: Profile, c: Candidate, cap: int, length: float, before: float):
    """Earliest start by trying every step time (no caches, no tables)."""
    starts = sorted({t for n in p.nodes for t in p.times[n] if t < before})
    if c.consolidate and c.gpus <= cap:
        for s in starts:
            for n in p.nodes:
                if p.window_min(n, s, s + length) >= c.gpus:
                    return s, [(n, c.gpus)]
        return INF, []
    if c.consolidate:  # the multi-node sweep over every node's steps, afresh (no cache)
        return p._earliest_nodes(c.gpus, min_nodes(c.gpus, cap), length, before)
    for s in starts:
        offers = sorted(((p.window_min(n, s, s + length), n) for n in p.nodes), key=lambda o: -o[0])
        if sum(o for o, _ in offers) >= c.gpus:
            alloc, left = [], c.gpus
            for o, n in offers:
                if left <= 0 or o <= 0:
                    break
                alloc.append((n, min(o, left)))
                left -= alloc[-1][1]
            return s, alloc
    return INF, []


def _reference_pass(now, cands, free, ends, cap, params):
    """Plan every job in order; (started, reservations)."""
    res = params.resolution_s
    base = math.floor(now / res) * res
    horizon = base + params.window_s
    p = Profile.__new__(Profile)
    p.base, p.nodes, p.ready = base, list(free), []
    p.times, p.frees = {}, {}
    for n in free:
        rounded = [(math.ceil(e / res) * res if e < INF else e, g) for e, g in ends[n]]
        p.times[n], p.frees[n] = _steps_by_hand(base, free[n], rounded)
    # every node "touched": the multi-node sweep walks every node's steps
    p.pos, p.changed, p.touched = {n: i for i, n in enumerate(p.nodes)}, [], set(range(len(free)))
    p.ready_at, p.opens_at, p.any = {}, {}, None  # the per-pass caches: none here
    free_now, started, reserved = dict(free), [], []
    if sum(free.values()) <= 0:
        return started, reserved
    for c in cands[: params.max_job_test]:
        span = math.ceil(c.limit_s / res) * res if c.limit_s < INF else INF
        idx = FreeIndex(cap)
        for n in free:
            if free_now[n] > 0:
                idx.set(n, min(free_now[n], p.window_min(n, base, base + span)))
        alloc = choose_gpus(idx, c.gpus, c.consolidate)
        if alloc is not None:
            p.reserve(alloc, base, base + span)
            for n, g in alloc:
                free_now[n] -= g
            started.append((c.job_id, alloc))
            continue
        s, where = _ref_earliest(p, c, cap, span, horizon)
        if where and s < horizon:
            p.reserve(where, s, s + span)
            reserved.append((c.job_id, s))
    return started, reserved


def _instance(seed):
    rng = random.Random(seed)
    cap = rng.choice([2, 4, 8])
    names = [f"n{i}" for i in range(rng.randint(2, 9))]
    free, ends = {}, {}
    for n in names:
        used, ends[n] = 0, []
        while used < cap and rng.random() < 0.85:
            g = rng.randint(1, cap - used)
            end = rng.choice([rng.uniform(10, 20000), rng.choice([600.0, 3600.0]), INF])
            ends[n].append((end, g))
            used += g
        free[n] = cap - used
    limits = [60.0, 600.0, 3600.0, 14400.0, 86400.0 * 3, INF]
    cands = [
        Candidate(
            i,
            rng.choice([1, 1, 2, max(1, cap // 2), cap, 2 * cap, 3 * cap]),
            rng.random() < 0.8,
            rng.choice(limits),
        )
        for i in range(rng.randint(1, 40))
    ]
    params = BackfillParams(
        window_s=rng.choice([3600.0, 86400.0]),
        max_job_test=rng.choice([5, 30]),
        resolution_s=rng.choice([1.0, 60.0, 300.0]),
    )
    return cap, free, ends, cands, params


@pytest.mark.parametrize("seed", range(300))
def test_fast_pass_matches_the_reference_planner(seed):
    cap, free, ends, cands, params = _instance(seed)
    now = 500.0 + seed
    reserved = []
    got = backfill_pass(
        now,
        cands,
        free,
        ends.__getitem__,
        cap,
        params,
        on_reserve=lambda j, t: reserved.append((j, t)),
    )
    want, want_reserved = _reference_pass(now, cands, free, ends, cap, params)
    assert got == want
    # the lazy pass plans blocked jobs in order, stopping after the last one a later
    # job's start-now check needed: its reservations are a prefix of the reference's
    assert reserved == want_reserved[: len(reserved)]
    # the per-node steps (what the simulator keeps across passes) change nothing
    res = params.resolution_s
    steps = {
        n: node_steps(
            free[n], [(math.ceil(e / res) * res if e < INF else e, g) for e, g in ends[n]]
        )
        for n in free
    }
    assert backfill_pass(now, cands, free, None, cap, params, steps=steps) == want


@pytest.mark.parametrize("seed", range(50))
def test_node_steps_give_the_step_function(seed):
    rng = random.Random(seed)
    base = rng.choice([0.0, 600.0, 1200.0])
    ends = [
        (rng.choice([300.0, 600.0, 900.0, 1800.0, INF]), rng.randint(1, 3))
        for _ in range(rng.randint(0, 5))
    ]
    free = rng.randint(0, 3)
    p = Profile(base, {"n": free}, {"n": ends})
    assert (p.times["n"], p.frees["n"]) == _steps_by_hand(base, free, ends)
    st = node_steps(free, ends)
    for g in range(1, 20):  # ready[g]: when the node first has g free (-inf: now)
        times, frees = _steps_by_hand(-INF, free, ends)
        want = next((t for t, f in zip(times, frees) if f >= g), INF)
        assert (st.ready[g] if g < len(st.ready) else INF) == want


class _Uncached(Simulator):
    """The same simulator, its per-node steps rebuilt at every pass."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        scheduler = self.scheduler
        kept = scheduler.node_steps

        def node_steps():
            scheduler.steps = {}
            return kept()

        scheduler.node_steps = node_steps


@pytest.mark.parametrize("shape", ["narrow", "wide"])
def test_steps_kept_across_passes_change_no_decision(shape):
    jobs = synth_jobs(600, 32, load=1.1, seed=3)
    if shape == "wide":
        jobs = [replace(j, gpus=2 * j.gpus, duration_s=j.duration_s / 2) for j in jobs]
    trace = fill_time_limits(jobs, seed=0)
    cl = SimConfig(nodes=4, gpus_per_node=8, placement="consolidate", scheduler="slurm")
    cfg = PolicyConfig(policy="gittins")
    runs = []
    for cls in (Simulator, _Uncached):
        sim = cls(trace, cfg, cl)
        done = sim.run()
        runs.append(
            (
                [(j.id, j.first_start, j.finish, j.preemptions) for j in done],
                sim.preemptions,
                sim.timeouts,
            )
        )
    assert runs[0] == runs[1]
    assert all(f is not None for _, _, f, _ in runs[0][0])


def test_ready_table_is_right_after_ends_already_past():
    # a job's rounded end at or before the pass's base counts as free from the base on
    st = node_steps(1, [(600.0, 2), (1200.0, 1)])
    p = Profile.from_steps(900.0, {"n": st})
    assert (p.times["n"], p.frees["n"]) == ([900.0, 1200.0], [3, 4])
    assert p._single_earliest(3, 100.0, 1e9) == [900.0]
    assert p._single_earliest(4, 100.0, 1e9) == [1200.0]
    assert p._single_earliest(5, 100.0, 1e9) == [INF]
    assert bisect_right(p.times["n"], 900.0) == 1


@pytest.mark.parametrize("seed", range(40))
def test_sliding_minimum_is_window_min(seed):
    """`SlidingMin` (the any-node earliest start's per-node minimum) gives
    `Profile.window_min` for windows whose start and end only move forward."""
    from slurm_ext.sim.bfany import SlidingMin

    rng = random.Random(seed)
    base = 600.0
    ends = [
        (base + rng.choice([60.0, 120.0, 600.0, 1800.0, INF]), rng.randint(1, 3)) for _ in range(6)
    ]
    p = Profile(base, {"n": rng.randint(0, 2)}, {"n": ends})
    for t, g in [(rng.uniform(base, base + 3000), rng.randint(1, 2)) for _ in range(3)]:
        if p.window_min("n", t, t + 300) >= g:
            p.reserve([("n", g)], t, t + 300)  # reservations dip the step function
    times = p.times["n"]
    slider = SlidingMin(times, p.frees["n"])
    start, length = base, rng.choice([60.0, 600.0, 5000.0])
    for _ in range(30):
        start += rng.choice([0.0, 30.0, 60.0, 400.0])
        length += rng.choice([0.0, 0.0, 100.0])  # the end moves forward too
        assert slider.fewest(start, start + length) == p.window_min("n", start, start + length)


@pytest.mark.parametrize("seed", range(60))
def test_any_node_earliest_with_reservations_in_between(seed):
    """A job that may take any nodes: the profile's answer (sliding minima, all nodes'
    total, the last answer per shape as a lower bound) is the reference's, asked again
    and again for a few shapes while reservations land in between."""
    rng = random.Random(seed)
    cap, base = 4, 600.0
    free, ends = {}, {}
    for n in (f"n{i}" for i in range(rng.randint(2, 6))):
        ends[n] = [(base + rng.choice([60.0, 300.0, 900.0, 3600.0]), rng.randint(1, 2))]
        free[n] = cap - sum(g for _, g in ends[n])
    p = Profile(base, free, ends)
    shapes = [(rng.choice([1, 2, 3, 5, 7]), rng.choice([60.0, 600.0, 1800.0])) for _ in range(3)]
    for i in range(25):
        gpus, length = rng.choice(shapes)
        c = Candidate(i, gpus, False, length)
        want = _ref_earliest(p, c, cap, length, base + 86400.0)
        assert p.earliest(c, cap, length, base + 86400.0) == want
        if want[1]:
            p.reserve(want[1], want[0], want[0] + length)
