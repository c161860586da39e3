"""The composed SiteFactor on a live Slurm (priority/multifactor with slurmdbd): after one
service pass with `fairshare_site_weight` W > 0, slurmctld's priorities are the sum the
simulator's composed key models, for the ages and fair-share factors Slurm reports, and
they order the jobs as that key and the service's own order do."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import cluster_options, hold_the_gpu, live_client

from slurm_ext.core.model import JobView
from slurm_ext.policy import PolicyConfig, build_table, composed_score, priority_key
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

MAX_AGE_S = 60.0  # PriorityMaxAge=1 (minute): ages move priorities within the test
W = 2000.0
# the harness's accounting weights (testing/accounting.py): PriorityWeightAge and
# PriorityWeightFairshare 1000; the model is told the same
POLICY = PolicyConfig(
    fairshare_site_weight=W,
    fairshare_weight_age=1000.0,
    fairshare_weight=1000.0,
    fairshare_max_age_s=MAX_AGE_S,
    gittins_kind_min_samples=2,
    wait_guard_factor=0.0,  # no guard: the shares alone
)
# GPU-seconds of each kind's past jobs (user root): share 1, about 0.88 and about 0.38
KINDS = {"quick": 60.0, "mid": 300.0, "long": 2.5e5}


def _history() -> list[tuple]:
    rows, i = [], 1
    for name, gpu_s in KINDS.items():
        for _ in range(5):
            rows.append((i, gpu_s, gpu_s, 1000.0 + i, "root", name, "", None))
            i += 1
    return rows


def _snapshot(cluster: LocalCluster) -> tuple[dict[int, int], dict[int, tuple[float, float]]]:
    """Slurm's priority of each pending job (squeue %Q) and its normalized age and
    fair-share factors (sprio), read so that no recalculation fell between them."""
    for _ in range(20):
        q1 = cluster.run("squeue", "-h", "-t", "PD", "-o", "%i|%Q")
        factors = cluster.run("sprio", "-h", "-o", "%i|%a|%f")
        q2 = cluster.run("squeue", "-h", "-t", "PD", "-o", "%i|%Q")
        if q1 == q2:
            prio = {int(i): int(q) for i, q in (ln.split("|") for ln in q1.split())}
            fs = {
                int(i): (float(a), float(f))
                for i, a, f in (ln.split("|") for ln in factors.split())
                if i.strip().isdigit()
            }
            return prio, fs
        time.sleep(0.3)
    raise AssertionError("Slurm's priorities kept changing between reads")


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_slurm_sums_the_site_factor_the_simulator_models(tmp_path: Path, version: str) -> None:
    opts = cluster_options(version)
    conf = "PriorityMaxAge=1\nPriorityFlags=NO_FAIR_TREE"
    with LocalCluster(
        nodes=1, gpus_per_node=1, root=tmp_path / "c", accounting=True, extra_conf=conf, **opts
    ) as cluster:
        hold_the_gpu(cluster)
        first = [cluster.sbatch("--gres=gpu:1", "-J", n, wrap="sleep 60") for n in KINDS]
        # the first three age by a third of PriorityMaxAge (~333 points): more than the
        # quick and mid kinds' site factors differ by, less than mid's and long's
        time.sleep(20)
        late = [cluster.sbatch("--gres=gpu:1", "-J", n, wrap="sleep 60") for n in ("quick", "mid")]
        jobs = first + late

        store = Store(tmp_path / "s.db")
        store.add_completions(_history(), "sacct")
        cfg = ServiceConfig(store=str(store.path), port=0, history_source="store", policy=POLICY)
        client = live_client(cluster, "cli")
        service = Service(cfg, client, store)
        res = service.run_pass()
        assert res.errors == 0 and sorted(res.planned) == sorted(jobs)
        assert res.writes == len(jobs)

        prio, factors = _snapshot(cluster)
        assert sorted(prio) == sorted(jobs)
        # the simulator's composed key for the same jobs, with Slurm's age and fair-share
        pending = {j.job_id: j for j in client.jobs(["PENDING"])}
        table = build_table(store.history_kinds(POLICY.history_window), POLICY)
        plain = replace(POLICY, fairshare_site_weight=0.0)
        predicted = {}
        for job_id in jobs:
            j = pending[job_id]
            view = JobView(job_id, max(1, j.gpus), j.submit_time, user=j.user, job_name=j.name)
            score = priority_key(view, time.time(), plain, table)[2]
            age, fs = factors[job_id]
            predicted[job_id] = -composed_score(score, age * MAX_AGE_S, fs, POLICY)
            # Slurm's sum is the model's (sprio prints factors rounded: 1 point of slack)
            assert abs(prio[job_id] - predicted[job_id]) <= 1, (job_id, prio, predicted)
            assert j.site_factor == res.planned[job_id]
        slurm_order = sorted(jobs, key=lambda j: (-prio[j], j))
        assert slurm_order == sorted(jobs, key=lambda j: (-predicted[j], j))
        # ... and the service's own order is Slurm's. It reads the priorities Slurm last
        # computed: the first pass read them before the jobs aged (PriorityCalcPeriod 1
        # minute against PriorityMaxAge 1 minute here; a site's 5 minutes against 7 days
        # move them half a point), its writes made Slurm compute them afresh
        again = service.run_pass()
        assert again.writes == 0 and again.errors == 0
        assert [d.job_id for d in again.decisions if d.job_id in prio] == slurm_order
        # the sum decides: neither submit order nor the index alone is this order
        quick, mid, long_ = first
        assert slurm_order.index(mid) < slurm_order.index(late[0])  # age beats the index
        assert slurm_order.index(late[1]) < slurm_order.index(long_)  # the index beats age
        store.close()
