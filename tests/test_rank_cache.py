"""The service's pass-to-pass ranking (slurm_ext/service/rank_cache.py) is `policy.rank`, decision
for decision, while running jobs move past waiting ones, waiting jobs reach their
starvation promotion or wait-guard tier, jobs come and go and the history grows; and
the store shows each job's place in the latest order without rewriting the rank of
every waiting job. Pure functions and real SQLite, no Slurm."""

from __future__ import annotations

import gc
import random
import sqlite3
from dataclasses import replace

import pytest
from conftest import old_store

from slurm_ext.core.model import Completed, Job, JobState, JobView, Node
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.rank_cache import RankCache
from slurm_ext.store.db import Store
from slurm_ext.store.rows import DecisionRecord
from slurm_ext.store.schema import SCHEMA_VERSION
from slurm_ext.testing.snapshot_client import ReplayClient

POLICIES = [
    PolicyConfig(),  # gittins, GPU classes and kinds
    PolicyConfig(starvation_factor=2.0, wait_guard_factor=3.0),  # promotions, guard
    PolicyConfig(policy="las", starvation_factor=2.0),
    PolicyConfig(policy="fifo"),
    PolicyConfig(policy="multifactor"),
    PolicyConfig(fairshare_site_weight=1000),
    PolicyConfig(policy="fairshare"),
]


def _history(rng: random.Random, n: int) -> list[Completed]:
    return [
        Completed(
            rng.choice((1, 2, 4)), rng.lognormvariate(7, 1.5), f"u{rng.randrange(4)}", "train"
        )
        for _ in range(n)
    ]


def _waiting(rng: random.Random, job_id: int, now: float) -> JobView:
    ran = rng.random() < 0.5  # one that ran before: it can be promoted
    return JobView(
        job_id=job_id,
        gpus=rng.choice((1, 2, 4, 8)),
        submit_time=now - rng.uniform(0, 5000),
        attained_gpu_s=rng.uniform(100, 5000) if ran else 0.0,
        executed_s=rng.uniform(50, 500) if ran else 0.0,
        last_run_s=rng.uniform(50, 500) if ran else 0.0,
        waiting_since=now - rng.uniform(0, 2000),
        user=f"u{rng.randrange(4)}",
        job_name="train",
    )


@pytest.mark.parametrize("config", POLICIES, ids=lambda c: c.policy + str(POLICIES.index(c)))
def test_the_cache_ranks_as_the_policy_pass_after_pass(config):
    rng = random.Random(7)
    now = 100_000.0
    waiting = [_waiting(rng, j, now) for j in range(1, 300)]
    running = [  # (view at start, start time): their service grows every pass
        (JobView(job_id=1000 + j, gpus=rng.choice((1, 2, 4)), submit_time=now - 3000,
                 running=True, user=f"u{j % 4}", job_name="train"), now - rng.uniform(0, 3000))
        for j in range(40)
    ]  # fmt: skip
    history = _history(rng, 200)
    cache = RankCache()
    for step in range(40):
        now += rng.choice((1.0, 30.0, 400.0))
        views = list(waiting)
        for v, start in running:
            ran = now - start
            views.append(replace(v, attained_gpu_s=v.gpus * ran, executed_s=ran, last_run_s=ran))
        rng.shuffle(views)  # Slurm's order is not the policy's
        hist = history or None
        got = cache.rank(views, now, config, hist)
        assert got == rank(views, now, config, hist), f"pass {step}"
        if step % 7 == 3:  # jobs come and go; one changes (a new view object)
            waiting.pop(rng.randrange(len(waiting)))
            waiting.append(_waiting(rng, 5000 + step, now))
            i = rng.randrange(len(waiting))
            waiting[i] = replace(waiting[i], gpus=waiting[i].gpus + 1)
        if step % 11 == 5:  # the history grows: a new table
            history = history + _history(rng, 5)
        if step == 30:
            history = []  # no history: 2D-LAS, no table


def test_a_changed_policy_is_not_served_from_the_cache():
    rng = random.Random(3)
    views = [_waiting(rng, j, 10_000.0) for j in range(50)]
    history = _history(rng, 100)
    cache = RankCache()
    cache.rank(views, 10_000.0, PolicyConfig(), history)
    other = PolicyConfig(gittins_classes="pooled", gittins_kinds=[])
    assert cache.rank(views, 10_001.0, other, history) == rank(views, 10_001.0, other, history)


def _store_ranks(path) -> dict[int, int]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT job_id, rank FROM decisions"))
    finally:
        db.close()


def test_the_store_shows_the_latest_order_without_rewriting_waiting_ranks(tmp_path):
    """A running job whose attained service grows past its queue limit drops below the
    waiting jobs: every waiting job moves up one place. The store shows the new ranks
    (the policy's order) while no waiting job's decision row was written again."""
    cfg = ServiceConfig(
        store=str(tmp_path / "s.db"),
        port=0,
        history_source="store",
        policy=PolicyConfig(policy="las", queue_thresholds_gpu_s=[1000.0], min_run_s=0.0),
    )
    running = Job(job_id=1, state=JobState.RUNNING, gpus=1, submit_time=0.0, start_time=100.0,
                  nodes=("n1",))  # fmt: skip
    waiting = [
        Job(job_id=j, state=JobState.PENDING, gpus=1, submit_time=10.0 + j) for j in range(2, 6)
    ]
    client = ReplayClient([running, *waiting], [Node("n1", state="MIXED", gpus=4, gpus_alloc=1)])
    store = Store(cfg.store)
    svc = Service(cfg, client, store)
    first = svc.run_pass(200.0)  # 100 GPU-s: queue 0, ahead of the waiting jobs
    assert first.decisions[0].job_id == 1
    columns = _store_ranks(cfg.store)
    res = svc.run_pass(1200.0)  # 1100 GPU-s: queue 1, behind them
    order = [d.job_id for d in res.decisions]
    assert order == [2, 3, 4, 5, 1]
    shown = store.decisions()
    assert {j: d.rank for j, d in shown.items()} == {j: i for i, j in enumerate(order)}
    reader = Store(cfg.store, readonly=True)  # what `queue`, `explain` and /v1/queue read
    assert {j: d.rank for j, d in reader.decisions().items()} == {j: i for i, j in enumerate(order)}
    reader.close()
    after = _store_ranks(cfg.store)
    assert all(after[j] == columns[j] for j in range(2, 6)), "waiting rows were rewritten"
    assert after[1] == 4  # the running job's decision changed (its queue): a new row
    assert Service(cfg, client, store)._load()[1] == svc._decisions
    store.close()


def test_an_order_naming_a_job_without_a_decision_is_ignored_and_a_bad_one_refused(tmp_path):
    store = Store(tmp_path / "s.db")
    d = DecisionRecord(7, 3, 0, 1.0, False, "", None, "site_factor", None, 1.0)
    store.save_decisions([d], order=[9, 7])
    assert store.decisions()[7].rank == 1  # its place; job 9 has no decision
    store.save_decisions([replace(d, job_id=8, rank=5)])  # no order given: kept
    assert {j: r.rank for j, r in store.decisions().items()} == {7: 1, 8: 5}
    with store.db:
        store.db.execute("UPDATE decision_order SET job_ids = x'0102'")
    with pytest.raises(Exception, match="int64 job ids"):
        store.decisions()
    store.close()


def test_a_version_5_store_gains_the_order_table(tmp_path):
    store = old_store(
        tmp_path / "old.db",
        5,
        "INSERT INTO decisions (job_id, rank, queue, gittins, promoted, reason, mode,"
        " decided_at) VALUES (4, 2, 0, 1.0, 0, 'r', 'site_factor', 1.0)",
    )
    assert store.schema_version == SCHEMA_VERSION >= 6
    assert store.decisions()[4].rank == 2  # no order yet: the stored rank
    store.close()


def test_the_collector_waits_during_a_pass(tmp_path):
    seen = []

    class Watching(ReplayClient):
        def jobs(self, states=()):
            seen.append(gc.isenabled())
            return super().jobs(states)

    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store")
    store = Store(cfg.store)
    job = Job(job_id=1, state=JobState.PENDING, gpus=1, submit_time=1.0)
    svc = Service(cfg, Watching([job], [Node("n1", gpus=4)]), store)
    assert gc.isenabled()
    svc.run_pass(10.0)
    assert seen == [False] and gc.isenabled()
    gc.disable()  # a process that turned it off keeps it off
    try:
        svc.run_pass(20.0)
        assert not gc.isenabled()
    finally:
        gc.enable()
    store.close()
