"""Attained service (issue 15, items 3, 5 and 14): each stint charged at the GPUs it
held and never decreasing, a reused job id starting a new record, and a run that started
and ended between passes (or while the store failed) counted. No Slurm needed; the live
cases are in tests/test_service_hardening_live.py."""

from __future__ import annotations

import sqlite3

from slurm_ext.core.attained import Stint
from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.service.fold import fold_jobs
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.store.rows import DecisionRecord
from slurm_ext.testing.snapshot_client import ReplayClient


def _job(job_id: int, state: str, gpus: int = 8, start=None, end=None, **kw) -> Job:
    kw.setdefault("submit_time", 100.0)
    return Job(
        job_id=job_id, state=JobState(state), gpus=gpus, start_time=start, end_time=end, **kw
    )


def test_a_shrunk_running_job_keeps_the_service_it_had_and_never_decreases():
    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=8, start=100)], now=110)
    seen = [recs[1].attained_gpu_s(110)]
    assert seen == [80]
    # the owner shrinks it to one node between the passes at 110 and 130
    for now in (130, 140, 160):
        recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=4, start=100)], now=now)
        seen.append(recs[1].attained_gpu_s(now))
    assert seen == [80, 240, 280, 360]  # 8 GPUs until the pass that saw 4, then 4
    assert seen == sorted(seen)
    recs, comp = fold_jobs(recs, [_job(1, "COMPLETED", gpus=4, start=100, end=170)], now=175)
    assert comp == [(1, 400.0, 70.0, 170)]


def test_a_grown_job_is_charged_the_larger_count_for_the_uncertain_gap():
    s = Stint.begin(0.0, 4).resized(8, last_seen=10.0, now=20.0)
    assert (s.gpu_s(10.0), s.gpu_s(20.0), s.gpu_s(30.0)) == (40.0, 120.0, 200.0)
    s = Stint.begin(0.0, 8).resized(4, last_seen=10.0, now=20.0)
    assert (s.gpu_s(20.0), s.gpu_s(30.0)) == (160.0, 200.0)


def test_a_resized_stint_survives_the_store(tmp_path):
    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=8, start=100)], now=110)
    recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=4, start=100)], now=130)
    store = Store(tmp_path / "s.db")
    store.save_jobs(recs.values())
    store.close()
    again = Store(tmp_path / "s.db", readonly=True).job(1)
    assert again is not None and again.attained_gpu_s(140) == recs[1].attained_gpu_s(140) == 280


def test_a_reused_job_id_starts_a_new_record():
    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=4, start=100)], now=150)
    assert recs[1].attained_gpu_s(150) == 200
    # slurmctld's state was reset: job 1 is another job, submitted later, never run
    new = _job(1, "PENDING", gpus=2, submit_time=500.0, restart_count=0)
    recs, comp = fold_jobs(recs, [new], now=510)
    assert recs[1].attained_gpu_s(510) == 0 and recs[1].submit_time == 500
    assert recs[1].state == "PENDING" and not recs[1].done
    assert comp == [(1, 200.0, 50.0, 150)]  # the old job's service went to the history


def test_a_requeue_moves_submit_time_but_keeps_the_record():
    recs, _ = fold_jobs({}, [_job(1, "RUNNING", gpus=4, start=100)], now=150)
    requeued = _job(1, "PENDING", gpus=4, submit_time=160.0, restart_count=1)
    recs, comp = fold_jobs(recs, [requeued], now=170)
    assert recs[1].closed_gpu_s == 200 and comp == []
    # a backend that cannot say how often it restarted: keep the record too
    unknown = _job(1, "PENDING", gpus=4, submit_time=900.0, restart_count=None)
    recs, _ = fold_jobs(recs, [unknown], now=910)
    assert recs[1].closed_gpu_s == 200


def test_a_run_between_two_passes_is_counted():
    recs, _ = fold_jobs({}, [_job(4, "PENDING", gpus=2)], now=110)
    done = _job(4, "COMPLETED", gpus=2, start=120, end=150)
    recs, comp = fold_jobs(recs, [done], now=160)
    assert recs[4].done and recs[4].closed_gpu_s == 60 and comp == [(4, 60.0, 30.0, 150)]
    # first seen already finished (the service was down or its store failing)
    recs, comp = fold_jobs({}, [_job(5, "FAILED", gpus=3, start=120, end=130)], now=160)
    assert comp == [(5, 30.0, 10.0, 130)]
    # cancelled while pending: nothing ran, nothing counted
    recs, comp = fold_jobs({}, [_job(6, "CANCELLED", gpus=3, start=130, end=130)], now=160)
    assert comp == []


def test_a_run_slurm_timed_at_zero_seconds_is_a_completion():
    # Slurm's times are whole seconds: a sub-second run may start and end in one second.
    # It ran, so it belongs in the Gittins history (it was dropped: issue 13, the shortest
    # jobs of a live replay missing from the service's history)
    recs, _ = fold_jobs({}, [_job(7, "PENDING", gpus=2)], now=110)
    recs, comp = fold_jobs(recs, [_job(7, "COMPLETED", gpus=2, start=120, end=120)], now=121)
    assert recs[7].done and comp == [(7, 0.0, 0.0, 120)]
    # seen running by a pass, then ended within that second
    recs, _ = fold_jobs({}, [_job(8, "RUNNING", gpus=1, start=130)], now=130.5)
    recs, comp = fold_jobs(recs, [_job(8, "COMPLETED", gpus=1, start=130, end=130)], now=131)
    assert comp == [(8, 0.0, 0.0, 130)]
    # a job that failed at once, first seen finished
    _, comp = fold_jobs({}, [_job(9, "FAILED", gpus=1, start=140, end=140)], now=150)
    assert comp == [(9, 0.0, 0.0, 140)]


def test_runs_while_the_store_fails_are_counted_when_it_recovers(tmp_path):
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store")
    store = Store(cfg.store)
    client = ReplayClient([_job(1, "PENDING", gpus=2)], [Node("n1", gpus=4)])
    svc = Service(cfg, client, store)
    svc.run_pass(110.0)
    # the store fails (another process holds it locked) while job 1 runs and ends
    blocker = sqlite3.connect(cfg.store)
    blocker.execute("BEGIN EXCLUSIVE")
    store.db.execute("PRAGMA busy_timeout = 50")
    client.jobs_snapshot = [_job(1, "RUNNING", gpus=2, start=120)]
    try:
        svc.run_pass(130.0)
        raise AssertionError("the pass should have failed on the locked store")
    except sqlite3.OperationalError:
        svc._records = svc._decisions = None  # as serve() does after a failed pass
    client.jobs_snapshot = [_job(1, "COMPLETED", gpus=2, start=120, end=200)]
    try:
        svc.run_pass(210.0)
        raise AssertionError("the pass should have failed on the locked store")
    except sqlite3.OperationalError:
        svc._records = svc._decisions = None
    blocker.rollback()
    blocker.close()
    svc.run_pass(220.0)
    assert store.history_gpu_s(10) == [160.0]
    assert store.jobs(include_done=True)[1].closed_gpu_s == 160


def test_a_lost_site_factor_is_written_again_once(tmp_path):
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store")
    store = Store(cfg.store)
    job = _job(1, "PENDING", gpus=2, priority=5)
    client = ReplayClient([job], [Node("n1", gpus=4)])
    store.save_decisions(
        [DecisionRecord(1, 0, 0, 1.0, False, "", 1_000_000, "site_factor", None, 100.0)]
    )
    svc = Service(cfg, client, store)
    svc.run_pass(110.0)  # Slurm's priority 5 cannot hold a site factor of 1000000
    assert client.writes == 1
    svc.run_pass(120.0)  # an admin-fixed priority: not rewritten every pass
    assert client.writes == 1


def test_the_simulator_and_the_service_hold_the_same_value_for_the_same_stints():
    """One value type: a SimJob's stints and the service's folded snapshots of the same
    job give equal `Attained` values (closed totals, open stint, promotion)."""
    from slurm_ext.sim.simjob import SimJob
    from slurm_ext.sim.traces import TraceJob

    sim = SimJob(TraceJob(job_id=1, gpus=4, submit_time=0.0, duration_s=500.0), False)
    recs, _ = fold_jobs({}, [_job(1, "PENDING", gpus=4, submit_time=0.0)], now=5)
    sim.begin_stint(10.0, promoted=True)
    recs, _ = fold_jobs(recs, [_job(1, "RUNNING", gpus=4, start=10, submit_time=0.0)], now=12,
                        promoted={1})  # fmt: skip
    assert recs[1].attained == sim.service and sim.promoted_at == 0.0
    sim.end_stint(70.0)
    recs, _ = fold_jobs(
        recs, [_job(1, "COMPLETED", gpus=4, start=10, end=70, submit_time=0.0)], now=75
    )
    assert recs[1].attained == sim.service
    assert (sim.attained, sim.executed, sim.last_run, sim.promoted_at) == (240.0, 60.0, 60.0, None)
