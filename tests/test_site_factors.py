"""The composed SiteFactor (issue 16): with `fairshare_site_weight` W > 0 the service
writes each pending job's round(W x index share), the term the simulator's composed key
adds to Slurm's priority, and orders jobs as Slurm will. No Slurm needed (the live check
is tests/test_site_factors_live.py)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_ext.core.model import Job, JobState, JobView, Node
from slurm_ext.policy import PolicyConfig, build_table, multifactor_priority, priority_key
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient

USERS = ["ana", "bo", "cy"]
NAMES = ["train", "eval", "sweep"]


def _policy(rng: random.Random) -> PolicyConfig:
    return PolicyConfig(
        fairshare_site_weight=rng.choice([500.0, 2000.0, 20000.0, 123456.7]),
        wait_guard_factor=rng.choice([0.0, 1.0, 10.0]),
        gittins_kind_min_samples=2,
        gittins_class_min_samples=5,
        min_run_s=0,
    )


def _history(rng: random.Random, n: int) -> list[tuple]:
    """sacct-like completion rows (job id, GPU-s, run s, end, user, name, account, limit)."""
    rows = []
    for i in range(n):
        gpus = rng.choice([1, 2, 4, 8])
        run = rng.lognormvariate(7.0, 2.0)
        rows.append(
            (i + 1, gpus * run, run, 1000.0 + i, rng.choice(USERS), rng.choice(NAMES), "lab",
             rng.choice([3600.0, 86400.0, None]))
        )  # fmt: skip
    return rows


def _pending(rng: random.Random, n: int, now: float) -> list[Job]:
    jobs = []
    for i in range(n):
        site = rng.choice([0, rng.randint(0, 50000)])  # a factor Slurm holds already
        jobs.append(
            Job(
                job_id=1000 + i,
                name=rng.choice(NAMES),
                user=rng.choice(USERS),
                account="lab",
                state=JobState.PENDING,
                gpus=rng.choice([1, 2, 4, 8]),
                submit_time=now - rng.uniform(0.0, 3e5),
                time_limit_s=rng.choice([3600.0, 86400.0, None]),
                priority=site + rng.randint(1, 11000),  # Slurm's age + fair-share + site
                site_factor=site,
            )
        )
    return jobs


def _service(tmp_path: Path, policy: PolicyConfig, rows: list[tuple]) -> tuple[Store, dict]:
    store = Store(tmp_path / "s.db")
    store.add_completions(rows, "sacct")
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store", policy=policy)
    return store, {"config": cfg, "store": store}


@pytest.mark.parametrize("seed", range(12))
def test_the_service_writes_the_site_factor_the_simulators_key_adds(tmp_path, seed):
    """For a random queue, history and config, each pending job's planned value is what
    the simulator's composed key (`priority_key`, with any users' fair-share factors)
    adds to Slurm's multifactor priority; a second pass writes nothing."""
    rng = random.Random(seed)
    now = 1e6
    policy = _policy(rng)
    rows = _history(rng, rng.choice([0, 3, 40, 300]))
    jobs = _pending(rng, 25, now)
    store, kw = _service(tmp_path, policy, rows)
    svc = Service(client=ReplayClient(jobs, [Node("n1", gpus=8)]), **kw)
    res = svc.run_pass(now)
    # the simulator's side: its key for the same jobs (the service does not preempt:
    # gittins_index "auto" resolves to the whole-job index, as in the simulator)
    sim = policy.for_preemption(False)
    table = build_table(store.history_kinds(sim.history_window), sim)
    fair_share = {u: rng.uniform(0.0, 1.0) for u in USERS}
    w = policy.fairshare_site_weight
    for j in jobs:
        view = JobView(
            job_id=j.job_id, gpus=j.gpus, submit_time=j.submit_time,
            waiting_since=j.submit_time, user=j.user, job_name=j.name, account=j.account,
            time_limit_s=j.time_limit_s,
        )  # fmt: skip
        score = priority_key(view, now, sim, table, fair_share)[2]
        slurm = multifactor_priority(
            now - j.submit_time,
            fair_share[j.user],
            sim.fairshare_weight_age,
            sim.fairshare_weight,
            sim.fairshare_max_age_s,
        )
        assert res.planned[j.job_id] == -score - slurm, j
        assert 0 <= res.planned[j.job_id] <= round(w)
    # with a history the shares differ between kinds (unless the wait guard lifted every
    # job: each then gets the whole weight)
    if rows and not all(d.guarded for d in res.decisions):
        assert len(set(res.planned.values())) > 1
    assert res.writes == len(jobs)
    # Slurm now holds them (priority: the rest + the new factor); nothing changed since
    held = [
        replace(j, priority=j.priority - j.site_factor + res.planned[j.job_id],
                site_factor=res.planned[j.job_id])
        for j in jobs
    ]  # fmt: skip
    svc.client = ReplayClient(held, [Node("n1", gpus=8)])
    again = svc.run_pass(now)
    assert again.planned == {} and again.writes == 0
    store.close()


@pytest.mark.parametrize("seed", range(6))
def test_the_service_orders_pending_jobs_as_slurm_will(tmp_path, seed):
    """The service's order is Slurm's: its priority less the site factor it reports plus
    the new site factor, highest first, ties by job id; ranks and reasons follow."""
    rng = random.Random(100 + seed)
    now = 1e6
    policy = _policy(rng)
    jobs = _pending(rng, 30, now)
    store, kw = _service(tmp_path, policy, _history(rng, 200))
    res = Service(client=ReplayClient(jobs, [Node("n1", gpus=8)]), **kw).run_pass(now)
    by_id = {j.job_id: j for j in jobs}

    def slurm_key(j: Job) -> tuple:
        return (-(j.priority - j.site_factor + res.planned[j.job_id]), j.submit_time, j.job_id)

    expected = [j.job_id for j in sorted(jobs, key=slurm_key)]
    assert [d.job_id for d in res.decisions] == expected
    assert [d.rank for d in res.decisions] == list(range(len(jobs)))
    for d in res.decisions:
        assert f"SiteFactor {res.planned[d.job_id]} of" in d.reason
    # the index order alone differs (else this test could not tell the orders apart)
    plain = replace(kw["config"], policy=replace(policy, fairshare_site_weight=0.0))
    store.close()
    store2 = Store(tmp_path / "s.db")
    alone = Service(plain, ReplayClient(list(by_id.values()), [Node("n1", gpus=8)]), store2)
    assert [d.job_id for d in alone.run_pass(now).decisions] != expected
    store2.close()


def test_a_site_factor_that_outweighs_slurms_priority_and_one_that_does_not(tmp_path):
    """Two users' jobs: a short kind with little Slurm priority and a long kind with
    much. W 20000 puts the short one first; W 500 leaves Slurm's priority in charge."""
    rows = [(i, 60.0, 60.0, 1000.0 + i, "ana", "quick", "lab", None) for i in range(1, 6)]
    rows += [(i, 4e6, 5e5, 2000.0 + i, "bo", "long", "lab", None) for i in range(6, 11)]
    jobs = [
        Job(1, "quick", "ana", "lab", state=JobState.PENDING, gpus=1, submit_time=9e5,
            priority=100),
        Job(2, "long", "bo", "lab", state=JobState.PENDING, gpus=1, submit_time=9e5,
            priority=5000),
    ]  # fmt: skip
    for w, order in ((20000.0, [1, 2]), (500.0, [2, 1])):
        policy = PolicyConfig(fairshare_site_weight=w, gittins_kind_min_samples=2)
        store, kw = _service(tmp_path / str(w), policy, rows)
        res = Service(client=ReplayClient(jobs, [Node("n1", gpus=8)]), **kw).run_pass(1e6)
        assert res.planned[1] == round(w)  # 60 GPU-s: the whole share
        assert res.planned[2] < res.planned[1]
        assert [d.job_id for d in res.decisions] == order
        store.close()


def test_the_config_refuses_what_the_service_cannot_compose():
    with pytest.raises(ValueError, match=r"fairshare_site_weight.*mode = \"priority\""):
        ServiceConfig(mode="priority", policy=PolicyConfig(fairshare_site_weight=1000.0))
    with pytest.raises(ValueError, match="does not fit a SiteFactor"):
        ServiceConfig(policy=PolicyConfig(fairshare_site_weight=3e9))
    # W 0: rank-spaced values as before, in either mode
    assert not ServiceConfig(mode="priority").composes
    assert not ServiceConfig(policy=PolicyConfig()).composes
    assert ServiceConfig(policy=PolicyConfig(fairshare_site_weight=1.0)).composes
    # another policy than gittins has no index to compose: the values stay rank-spaced
    assert not ServiceConfig(policy=PolicyConfig(policy="las", fairshare_site_weight=1.0)).composes
