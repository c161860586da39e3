"""The live service sees a requeued job as the simulator does (issue 13, the requeue thrash).

Reconstructed from the live replays (docs/benchmarks.md, Session 5: the requeue thrash):
right after `scontrol requeue`, `squeue --json` shows the job COMPLETING with StartTime
moved to the requeue instant, then PENDING (reason BeginTime: Slurm's hold) with
SubmitTime moved to the requeue and restart_cnt + 1. The service read the COMPLETING
glimpse as a restart (a stint of a few tenths of a second became the job's last run),
ordered wait-guarded jobs by the moved SubmitTime (the simulator: by the first submit),
and could requeue others for a job still in its hold (the simulator keeps it out of the
queue). Each test fails on the service before the fix.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from conftest import wait_for

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.service.fold import fold_jobs
from slurm_ext.service.loop import ACTIVE, job_view, preemption_victims
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.traces import TraceJob

R, CG, PD = JobState.RUNNING, JobState.COMPLETING, JobState.PENDING

# the live case (synth2, 300 jobs, speedup 1,750; wall seconds): trace job 61, 16 GPUs,
# ran 1 s and was requeued; 51 s later the service requeued three jobs for it, promoted
SUBMIT, START, REQUEUE, LATER = 500.0, 575.0, 576.0, 627.5
POLICY = PolicyConfig(policy="las", min_run_s=0.69, queue_thresholds_gpu_s=[2.0, 8.0, 32.0])
GUARDED = PolicyConfig(policy="gittins", min_run_s=0.69, gittins_kinds=[], gittins_classes="pooled")


def _wide(state: JobState, now: float, **kw) -> Job:
    """Job 62 as `squeue --json` showed it at `now` (the fields fold_jobs reads)."""
    moved = now > REQUEUE  # Slurm moves SubmitTime to the requeue instant
    return Job(
        job_id=62,
        gpus=16,
        state=state,
        submit_time=REQUEUE if moved else SUBMIT,
        restart_count=1 if now >= REQUEUE else 0,
        requeue=True,
        comment="checkpoint=1",
        **kw,
    )


SNAPSHOTS = [  # (pass time, what squeue said)
    (575.4, _wide(R, 575.4, start_time=START)),
    (576.3, _wide(CG, 576.3, start_time=REQUEUE)),  # requeued: StartTime = the requeue
    (577.2, _wide(PD, 577.2, reason="BeginTime")),  # Slurm's hold
    (600.0, _wide(PD, 600.0, reason="Priority")),
    (LATER, _wide(PD, LATER, reason="Priority")),
]


def _fold(snapshots):
    recs: dict = {}
    for now, job in snapshots:
        recs, _ = fold_jobs(recs, [job], now)
    return recs


def _sim_view(now: float):
    """The simulator's view of the same job after its preemption at REQUEUE: the state
    `Simulator._stop` and `_preempt` leave (attained += GPUs x ran, last run = ran,
    waiting since the requeue), read through `SimJob.view` as the policy gets it."""
    t = TraceJob(job_id=62, submit_time=SUBMIT, duration_s=100.0, gpus=16)
    sj = SimJob(t, False)
    ran = REQUEUE - START
    sj.attained, sj.executed, sj.last_run = 16 * ran, ran, ran
    sj.waiting_since, sj.preemptions, sj.stints = REQUEUE, 1, 1
    return sj.view(now)


def test_requeue_seen_completing_ends_the_stint_at_the_requeue():
    recs = _fold(SNAPSHOTS[:2])
    rec = recs[62]
    assert rec.run_start is None  # not a fresh stint
    assert rec.last_run_s == REQUEUE - START
    assert rec.attained_gpu_s(576.3) == 16 * (REQUEUE - START)
    assert rec.waiting_since == REQUEUE
    # and it stays so while Slurm holds it, then waits from the requeue
    rec = _fold(SNAPSHOTS)[62]
    assert (rec.last_run_s, rec.waiting_since, rec.submit_time) == (1.0, REQUEUE, SUBMIT)


def test_a_second_completing_pass_does_not_start_a_stint():
    snaps = SNAPSHOTS[:2] + [(576.8, _wide(CG, 576.8, start_time=REQUEUE))] + SNAPSHOTS[2:]
    rec = _fold(snaps)[62]
    assert rec.run_start is None and rec.last_run_s == 1.0
    assert rec.attained_gpu_s(LATER) == 16.0


def test_service_view_of_a_requeued_job_is_the_simulators():
    rec = _fold(SNAPSHOTS)[62]
    live = job_view(SNAPSHOTS[-1][1], rec, LATER)
    sim = _sim_view(LATER)
    fields = ("gpus", "submit_time", "attained_gpu_s", "executed_s", "running")
    fields += ("last_run_s", "waiting_since", "promoted_at_gpu_s")
    assert {f: getattr(live, f) for f in fields} == {f: getattr(sim, f) for f in fields}


def test_guarded_jobs_go_first_come_first_served_by_their_first_submit():
    """The live decision at 04:30:27 (reconstructed): job 62, back from its hold, had
    waited past the wait guard (10 x its predicted run) and went ahead of every unguarded
    job, first come first served. Slurm had moved its SubmitTime to the requeue; the
    simulator orders by the trace's submit. The service must order as the simulator."""
    rec = _fold(SNAPSHOTS)[62]
    fresh = Job(job_id=77, gpus=8, state=PD, submit_time=560.0, reason="Priority")
    frec, _ = fold_jobs({}, [fresh], 560.0)
    history = [4.0] * 40 + [40.0] * 40 + [400.0] * 20  # GPU-seconds of finished jobs
    live = rank([job_view(SNAPSHOTS[-1][1], rec, LATER), job_view(fresh, frec[77], LATER)],
                LATER, GUARDED, history)  # fmt: skip
    other = dataclasses.replace(_sim_view(LATER), job_id=77, gpus=8, submit_time=560.0)
    other = dataclasses.replace(other, attained_gpu_s=0.0, executed_s=0.0, last_run_s=0.0)
    other = dataclasses.replace(other, waiting_since=560.0)
    sim = rank([_sim_view(LATER), other], LATER, GUARDED, history)
    assert [(d.job_id, d.queue, d.reason) for d in live] == [
        (d.job_id, d.queue, d.reason) for d in sim
    ]
    assert [d.job_id for d in live] == [62, 77]
    assert all("wait guard" in d.reason for d in live), [d.reason for d in live]


def test_no_requeues_for_a_job_slurm_still_holds():
    """A requeued job in Slurm's hold (BeginTime) cannot start: the simulator keeps it out
    of the queue, so the service must not requeue others for it either."""
    nodes = [Node("n1", gpus=16, gpus_alloc=16, cpus=32)]
    held = Job(job_id=62, gpus=16, state=PD, reason="BeginTime", submit_time=REQUEUE)
    runner = Job(job_id=90, gpus=16, state=R, start_time=1.0, nodes=("n1",), submit_time=1.0)
    runner = dataclasses.replace(runner, requeue=True, comment="checkpoint=1")
    by_id = {62: held, 90: runner}
    cfg = dataclasses.replace(POLICY, preemption_cost=False)
    decisions = rank(
        [
            job_view(held, _fold(SNAPSHOTS)[62], 580.0),
            job_view(runner, fold_jobs({}, [runner], 580.0)[0][90], 580.0),
        ],
        580.0,
        cfg,
    )
    assert decisions[0].job_id == 62  # it ranks first: 16 GPU-s against 9,280
    assert preemption_victims(decisions, by_id, nodes, set(), 580.0, cfg, "spread") == (None, [])
    # once its hold is over, the same snapshot requeues the running job for it
    by_id[62] = dataclasses.replace(held, reason="Priority")
    assert preemption_victims(decisions, by_id, nodes, set(), 580.0, cfg, "spread") == (62, [90])


@pytest.mark.slurm
def test_live_requeue_keeps_the_real_stint(live):
    """On a real slurmctld (each release and backend): a job requeued after ~3 s of its
    stint, folded from snapshots taken as fast as the backend answers, keeps that stint
    as its last run and waits from the requeue. The old fold made the COMPLETING
    glimpse a new stint (last run: tenths of a second) whenever a snapshot caught it."""
    cluster, client = live
    job_id = cluster.sbatch("--requeue", "--gres=gpu:1", "-J", "rq-fidelity")
    recs: dict = {}
    states: list[str] = []

    def fold(now: float) -> Job | None:
        nonlocal recs
        jobs = [j for j in client.jobs(states=ACTIVE) if j.job_id == job_id]
        if jobs:
            recs, _ = fold_jobs(recs, jobs, now)
            states.append(jobs[0].state.value)
        return jobs[0] if jobs else None

    wait_for(lambda: (j := fold(time.time())) is not None and j.running, what="job running")
    started = recs[job_id].run_start
    time.sleep(3.0)
    fold(time.time())
    requeued_at = time.time()
    cluster.run("scontrol", "requeue", str(job_id))
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        fold(time.time())
    rec = recs[job_id]
    assert rec.run_start is None, states
    assert 3.0 <= rec.last_run_s <= requeued_at - started + 1.5, (rec.last_run_s, states)
    assert abs(rec.waiting_since - requeued_at) <= 1.5, (rec.waiting_since, requeued_at)
