"""On a live slurmctld (the session's 4 x 4-GPU cluster), the service's pass bounds the
wait guard by a share of the GPUs Slurm reports: with every GPU held, three waiting jobs
(4, 4 and 1 GPUs) the guard is due for at once are lifted in deadline order while they
fit the share, the rest held back with the reason `explain` shows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import live_client, wait_for

from slurm_ext.policy import PolicyConfig
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

# completed GPU-seconds 1,000 .. 40,000 in the store: every waiting job has an index
HISTORY = [1000.0 * (i + 1) for i in range(40)]


def _policy(budget: float) -> PolicyConfig:
    return PolicyConfig(
        gittins_kinds=[],
        gittins_classes="pooled",
        gittins_time_limit=False,
        gittins_index="whole",
        wait_guard_factor=1e-6,  # due a few milliseconds after submission
        wait_guard_budget=budget,
    )


@pytest.mark.parametrize(("budget", "lifted"), [(0.25, 1), (0.5, 2)])
def test_a_live_pass_lifts_due_jobs_within_the_share(
    clean_queue: LocalCluster, tmp_path: Path, budget: float, lifted: int
) -> None:
    cluster = clean_queue
    blockers = [cluster.sbatch("--gres=gpu:4", "-N1", wrap="sleep 600") for _ in range(4)]
    wait_for(
        lambda: len(cluster.run("squeue", "-h", "-t", "R", "-o", "%i").split()) == len(blockers),
        what="the four blocking jobs to run",
    )
    # submitted in this order: due in this order (ties in the same second: by job id)
    waiting = [
        cluster.sbatch("--gres=gpu:4", "-N1", wrap="sleep 60"),
        cluster.sbatch("--gres=gpu:4", "-N1", wrap="sleep 60"),
        cluster.sbatch("--gres=gpu:1", wrap="sleep 60"),
    ]
    store = Store(tmp_path / "s.db")
    store.save_jobs([], [(900_000 + i, g, g, 1000.0 + i) for i, g in enumerate(HISTORY)])
    cfg = ServiceConfig(
        store=str(store.path), port=0, history_source="store", policy=_policy(budget)
    )
    # Slurm stamps the submit in whole seconds and the 1-GPU job is due 0.02 s after it:
    # a pass in the same instant could find it not yet due (CI saw it), so the pass runs
    # a second later than the submits, when all three are due
    res = Service(cfg, live_client(cluster, "cli"), store).run_pass(now=time.time() + 1.0)
    assert res.errors == 0
    by_id = {d.job_id: d for d in res.decisions}
    assert set(waiting) <= by_id.keys()
    # 16 GPUs: a share of 0.25 holds the first 4-GPU job, 0.5 both 4-GPU jobs; the 1-GPU
    # job due last does not fit either share and waits with its index's rank
    assert [by_id[j].guarded for j in waiting] == [k < lifted for k in range(3)]
    for j in waiting[lifted:]:
        assert "held back by its budget" in by_id[j].reason, by_id[j].reason
        assert f"may hold {budget:g} of the GPUs" in by_id[j].reason
    assert all("held back" not in by_id[j].reason for j in waiting[:lifted])
    order = [d.job_id for d in res.decisions if d.job_id in waiting]
    assert order[:lifted] == waiting[:lifted]  # the lifted jobs first
    # what `slurm-ext explain` reads: the stored reason
    stored = store.decisions()
    assert "held back by its budget" in stored[waiting[2]].reason
    store.close()
