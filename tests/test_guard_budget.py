"""The wait guard's budget (`wait_guard_budget`, policy/guard_budget.py): the guard lifts
the jobs it is due for in the order they became due while their GPUs fit a share of the
cluster, the first always; the rest keep their index's rank. The pure rule, the service's
order and reasons (`rank`, `RankCache`) and the simulator's incremental keys, which must
lift the same jobs on the same snapshot."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import Job, JobState, JobView, Node
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.policy.guard_budget import (
    budget_lifts,
    describe_held,
    held_back,
    owner,
    view_deadline,
)
from slurm_ext.policy.guards import GUARDED, starts_promoted
from slurm_ext.policy.tables import build_table
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.rank_cache import RankCache
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.users import synth_user_jobs
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient

# completed GPU-seconds 1,000 .. 40,000: expected whole-job GPU-time 20,500 s
HISTORY = [1000.0 * (i + 1) for i in range(40)]
WIDE_A, WIDE_B, NARROW, FRESH = 1, 2, 3, 4
NOW = 30_000.0


def _cfg(budget: float) -> PolicyConfig:
    return PolicyConfig(
        gittins_kinds=[],
        gittins_classes="pooled",
        gittins_time_limit=False,
        gittins_index="whole",
        wait_guard_factor=1.0,  # due after 1 x the predicted run
        wait_guard_budget=budget,
    )


def _views() -> list[JobView]:
    # due at submit + about 20,000 GPU-s / GPUs: A about 2,500, B 2,600, the 1-GPU job
    # 20,000; the fresh job not before 49,000 (submit 0 would read as unknown to the
    # service, which then counts from when it first saw the job)
    return [
        JobView(job_id=WIDE_B, gpus=8, submit_time=100.0),
        JobView(job_id=NARROW, gpus=1, submit_time=10.0),
        JobView(job_id=FRESH, gpus=1, submit_time=29_000.0),
        JobView(job_id=WIDE_A, gpus=8, submit_time=10.0),
    ]


def test_budget_lifts_in_deadline_order_the_first_always():
    due = [(5.0, 1, 8, ""), (3.0, 2, 8, ""), (4.0, 3, 1, "")]
    assert budget_lifts(due, 16, 0.5) == {2}  # 8 of 8: the 1-GPU job would not fit
    assert budget_lifts(due, 32, 0.5) == {2, 3}  # 9 of 16; then 17 > 16 stops the lift
    assert budget_lifts(due, 64, 0.5) == {1, 2, 3}
    # the first due job is lifted however wide (no starvation), even with no GPUs known
    assert budget_lifts([(7.0, 9, 16, "")], 8, 0.25) == {9}
    assert budget_lifts([(7.0, 9, 16, "")], 0, 0.25) == {9}
    # a later narrow job does not pass an earlier wide one that does not fit
    assert budget_lifts([(1.0, 1, 1, ""), (2.0, 2, 16, ""), (3.0, 3, 1, "")], 32, 0.25) == {1}
    # equal deadlines: by job id
    assert budget_lifts([(1.0, 5, 8, ""), (1.0, 4, 8, "")], 8, 1.0) == {4}
    assert budget_lifts([], 64, 0.5) == set()


def test_a_per_user_budget_bounds_each_user_alone():
    # alice's kind became due first and fills her share; bob's jobs are lifted beside it
    due = [(1.0, 1, 8, "alice"), (2.0, 2, 8, "alice"), (3.0, 3, 8, "bob"), (4.0, 4, 1, "alice")]
    assert budget_lifts(due, 64, 0.125) == {1, 3}  # each user's first; alice's 2 ends hers
    assert budget_lifts(due, 64, 0.25) == {1, 2, 3}  # 16 GPUs each: alice's 1-GPU job is 17
    one = [(d, j, g, "") for d, j, g, _ in due]  # one cluster-wide budget: 8 GPUs in all
    assert budget_lifts(one, 64, 0.125) == {1}
    assert owner(replace(_cfg(0.25), wait_guard_budget_scope="user"), "alice") == "alice"
    assert owner(_cfg(0.25), "alice") == ""
    per_user = replace(_cfg(0.25), wait_guard_budget_scope="user")
    assert "its user's jobs due earlier fill the budget" in describe_held(per_user)
    assert "lifted jobs may hold 0.25 of the GPUs" in describe_held(_cfg(0.25))


def test_held_back_only_with_a_budget_and_only_due_jobs():
    table = build_table(HISTORY, _cfg(0.25))
    views = _views()
    predicted_gpu_s = 1.0 / table.step(0.0)[0]  # the whole-job index's expected GPU-time
    assert 19_000 < predicted_gpu_s < 21_000
    assert view_deadline(views[3], _cfg(0.25), table) == pytest.approx(10 + predicted_gpu_s / 8)
    assert view_deadline(replace(views[3], running=True), _cfg(0.25), table) == math.inf
    assert held_back(views, NOW, _cfg(0.0), table, 32) == set()  # no budget: all lifted
    assert held_back(views, NOW, _cfg(0.25), table, 32) == {WIDE_B, NARROW}
    assert held_back(views, NOW, _cfg(0.5), table, 32) == {NARROW}
    assert held_back(views, NOW, _cfg(1.0), table, 32) == set()
    # before any is due, none is held
    assert held_back(views, 2000.0, _cfg(0.25), table, 32) == set()


def test_rank_keeps_held_jobs_in_index_order_and_says_why():
    cfg = _cfg(0.25)
    decisions = rank(_views(), NOW, cfg, HISTORY, total_gpus=32)
    by_id = {d.job_id: d for d in decisions}
    # A lifted; B and the 1-GPU job held back: same index per GPU-second, by submit time
    assert [d.job_id for d in decisions] == [WIDE_A, NARROW, WIDE_B, FRESH]
    assert [d.guarded for d in decisions] == [True, False, False, False]
    assert "wait guard: waited >= 1 x its predicted run" in by_id[WIDE_A].reason
    for j in (WIDE_B, NARROW):
        assert "held back by its budget" in by_id[j].reason
        assert "lifted jobs may hold 0.25 of the GPUs" in by_id[j].reason
    assert "held back" not in by_id[FRESH].reason
    # only the lifted job's stint keeps the guard's rank (wait_guard_keep)
    assert starts_promoted(decisions, cfg) == {WIDE_A}
    # no budget: the guard lifts all three, in submit order
    plain = rank(_views(), NOW, _cfg(0.0), HISTORY)
    assert [d.job_id for d in plain] == [WIDE_A, NARROW, WIDE_B, FRESH]
    assert [d.guarded for d in plain] == [True, True, True, False]


@pytest.mark.parametrize("scope", ["cluster", "user"])
def test_the_cache_ranks_as_the_policy_with_a_budget(scope):
    """Jobs become due, start (leave) and arrive: the kept deadlines and held flags give
    `rank`'s decisions, pass after pass."""
    rng = random.Random(5)
    cfg = replace(_cfg(0.25), wait_guard_budget_scope=scope)
    history = HISTORY[:]
    now = 0.0
    views = [
        JobView(
            job_id=j,
            gpus=rng.choice((1, 2, 4, 8, 16)),
            submit_time=rng.uniform(0, 4000),
            user=f"u{j % 3}",
        )
        for j in range(1, 120)
    ]
    cache = RankCache()
    held_seen = lifted_seen = 0
    for step in range(60):
        now += rng.choice((50.0, 400.0, 1500.0))
        got = cache.rank(views, now, cfg, history, 64)
        want = rank(views, now, cfg, history, total_gpus=64)
        assert got == want, f"pass {step}"
        held_seen += sum("held back" in d.reason for d in got)
        lifted_seen += sum(d.guarded for d in got)
        if step % 5 == 2:  # the best lifted job starts and leaves; a new one arrives
            top = next((d.job_id for d in got if d.guarded), None)
            views = [v for v in views if v.job_id != top]
            views.append(JobView(job_id=1000 + step, gpus=8, submit_time=now))
        if step % 17 == 9:
            history = history + [5000.0] * 3  # a new table: deadlines move
    assert held_seen > 50 and lifted_seen > 10  # the budget held jobs back and lifted some


def _run_checked(budget: float, seed: int, scope: str = "cluster") -> tuple[int, int]:
    """A non-preemptive simulator run whose every pass is checked against the service's
    `rank` on the same views: the same order, and the same jobs lifted."""
    trace = synth_user_jobs(400, 16, load=1.4, seed=seed, users=6)
    cfg = PolicyConfig(
        gittins_kind_min_samples=2,
        wait_guard_factor=2.0,
        wait_guard_budget=budget,
        wait_guard_budget_scope=scope,
    )
    held = lifted = 0

    def check(sim: Simulator, now: float) -> None:
        nonlocal held, lifted
        decisions = rank(sim.views(now), now, sim.cfg, sim.table, total_gpus=sim.total_gpus)
        assert sim.order() == [d.job_id for d in decisions], f"t={now}"
        pending = {j.id for j in sim.active() if not j.running}
        service = {d.job_id for d in decisions if d.guarded}
        sim_lifted = {j.id for j in sim.active() if not j.running and j.key[2] == GUARDED}
        assert service == sim_lifted, f"t={now}"
        if budget:  # the budget's own answer (without one it keeps none)
            assert sim_lifted == sim.guard_lifts & pending, f"t={now}"
        held += sum("held back" in d.reason for d in decisions)
        lifted += len(service)

    cl = SimConfig(nodes=2, gpus_per_node=8, preemptive=False, scheduler="slurm")
    Simulator(trace, cfg, cl, on_pass=check).run()
    return held, lifted


@pytest.mark.parametrize("scope", ["cluster", "user"])
def test_the_simulator_lifts_what_the_service_lifts(scope):
    held, lifted = _run_checked(0.25, seed=3, scope=scope)
    assert held > 0 and lifted > 0  # the budget bit on this trace


def test_without_a_budget_the_simulator_lifts_every_due_job():
    held, lifted = _run_checked(0.0, seed=3)
    assert held == 0 and lifted > 0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_budget_outside_0_1_is_refused(bad):
    with pytest.raises(ValueError, match="wait_guard_budget"):
        PolicyConfig(wait_guard_budget=bad)
    with pytest.raises(ConfigError, match="wait_guard_budget"):
        from_dict(PolicyConfig, {"wait_guard_budget": bad}, None)


@pytest.mark.parametrize(("node_gpus", "lifted"), [(8, {WIDE_A, WIDE_B}), (4, {WIDE_A})])
def test_a_service_pass_lifts_within_its_nodes_gpus(tmp_path, node_gpus, lifted):
    """The service's pass (real SQLite store, a replayed Slurm snapshot): the budget is
    a share of the GPUs of the nodes the pass reads (4 nodes of 8: 16 of 32 fit both
    wide jobs; of 4: 8 of 16 only the first), and the lifted jobs' stints go to the next
    fold as the guard's."""
    cfg = ServiceConfig(
        store=str(tmp_path / "s.db"), port=0, history_source="store", policy=_cfg(0.5)
    )
    store = Store(cfg.store)
    store.save_jobs([], [(9000 + i, g, g, 1000.0 + i) for i, g in enumerate(HISTORY)])
    jobs = [
        Job(job_id=v.job_id, state=JobState.PENDING, gpus=v.gpus, submit_time=v.submit_time)
        for v in _views()
    ]
    nodes = [Node(f"n{i}", state="IDLE", gpus=node_gpus) for i in range(4)]
    svc = Service(cfg, ReplayClient(jobs, nodes), store)
    res = svc.run_pass(NOW)
    assert {d.job_id for d in res.decisions if d.guarded} == lifted
    held = {d.job_id for d in res.decisions if "held back by its budget" in d.reason}
    assert held == {WIDE_A, WIDE_B, NARROW} - lifted
    assert svc._promoted == lifted
    store.close()
