"""The main scheduler's tick (`SimConfig.sched_tick_s`): slurmctld serves a submit's
request for a scheduling run at its background loop's next whole second, but runs the
main scheduler at once when a job ends (docs/simulator.md)."""

import json

import pytest
from click.testing import CliRunner

from slurm_ext.cli.sim import simulate
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

FIFO = PolicyConfig(policy="fifo")
# backfill far apart, so that only the main scheduler starts jobs unless a test says so
NO_BF = 10_000.0


def tj(i, gpus, submit, duration, limit=None):
    return TraceJob(
        job_id=i, gpus=gpus, submit_time=submit, duration_s=duration, time_limit_s=limit
    )


def run(trace, policy=FIFO, **cl):
    base = dict(nodes=1, gpus_per_node=4, preemptive=False, bf_interval_s=NO_BF)
    sim = Simulator(trace, policy, SimConfig(**{**base, **cl}))
    return sim, {j.id: j for j in sim.run()}


def test_a_submit_to_an_idle_cluster_waits_for_the_next_tick():
    _, jobs = run([tj(1, 1, 130, 50), tj(2, 2, 250, 50)], sched_tick_s=100)
    assert jobs[1].first_start == 200.0 and jobs[1].finish == 250.0
    # a submit at the instant a job ends: the end runs the main scheduler at once
    assert jobs[2].first_start == 250.0
    # off (the default): each at its submit, as before
    _, jobs = run([tj(1, 1, 130, 50), tj(2, 2, 250, 50)])
    assert jobs[1].first_start == 130.0 and jobs[2].first_start == 250.0


def test_submits_between_ticks_are_started_together_in_priority_order():
    # two 3-GPU jobs on 4 GPUs: the first submitted starts at the tick, the other waits
    trace = [tj(1, 3, 120, 400), tj(2, 3, 110, 400), tj(3, 1, 150, 30)]
    _, jobs = run(trace, sched_tick_s=100)
    assert jobs[2].first_start == 200.0  # submitted first: FIFO's first
    assert jobs[1].first_start == 600.0  # when job 2 ends, at once
    # strict order: job 3 (1 GPU) would fit beside job 2 but waits behind job 1, until
    # backfill (far off here) or job 1's start
    assert jobs[3].first_start == 600.0


def test_a_job_end_starts_the_next_waiting_job_at_once():
    trace = [tj(1, 4, 50, 500), tj(2, 4, 60, 100)]
    _, jobs = run(trace, sched_tick_s=100)
    assert jobs[1].first_start == 100.0  # the tick after both submits
    assert jobs[2].first_start == 600.0  # job 1 ends at 600: not at the tick of 700


def test_backfill_still_sees_a_submit_before_the_main_tick():
    # backfill every 30 s, the main scheduler every 100 s: the job starts at backfill's
    # first tick after its submit (150), as most live starts do
    _, jobs = run([tj(1, 1, 130, 50, limit=600)], sched_tick_s=100, bf_interval_s=30)
    assert jobs[1].first_start == 150.0


def test_a_requeued_job_released_from_its_hold_waits_for_the_tick():
    # SJF preempts the long job 1 for the short job 2; Slurm holds job 1 for 250 s
    sjf = PolicyConfig(policy="sjf", min_run_s=0, preemption_cost=False)
    trace = [tj(1, 4, 50, 1000), tj(2, 4, 150, 100)]
    common = dict(preemptive=True, requeue_delay_s=250, restart_overhead_s=0)
    _, jobs = run(trace, sjf, sched_tick_s=100, **common)
    assert jobs[1].first_start == 100.0 and jobs[2].first_start == 200.0
    assert jobs[1].preemptions == 1
    # held until 450 (job 2 ended at 300, the node is idle): started at the tick of 500
    assert jobs[1].start == 500.0
    _, jobs = run(trace, sjf, **common)
    assert jobs[2].first_start == 150.0 and jobs[1].start == 400.0  # 150 + 250, at once


def test_the_tick_runs_no_pass_when_a_job_end_already_served_the_request():
    passes = []
    trace = [tj(1, 4, 0, 50), tj(2, 4, 120, 80)]
    cluster = SimConfig(
        nodes=1, gpus_per_node=4, preemptive=False, bf_interval_s=NO_BF, sched_tick_s=100
    )
    sim = Simulator(trace, FIFO, cluster, on_pass=lambda s, now: passes.append(now))
    jobs = {j.id: j for j in sim.run()}
    # job 2's submit (120) asks for the tick of 200; job 1's end at 150 starts it first
    assert jobs[1].first_start == 100.0 and jobs[2].first_start == 150.0
    assert passes == [100.0, 150.0, 230.0]  # none at 200: nothing was asked since 150


@pytest.mark.parametrize(
    ("options", "needs"),
    [
        (dict(sched_tick_s=-1.0), "sched_tick_s must be a number of seconds >= 0"),
        (dict(sched_tick_s=float("nan")), "sched_tick_s must be a number of seconds >= 0"),
        (dict(sched_tick_s=1.0, scheduler="greedy"), "needs scheduler 'slurm'"),
    ],
)
def test_bad_ticks_are_refused_by_name(options, needs):
    with pytest.raises(ValueError, match=needs):
        SimConfig(**options)


def test_simulate_sched_tick_option(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("job_id,num_gpu,submit_time,duration,time_limit\n1,1,130,50,600\n")
    base = ["--trace", str(csv), "--nodes", "1", "--gpus-per-node", "4", "--policy", "fifo"]
    base += ["--no-preemptive", "--bf-interval", "10000", "--json"]
    jct = {}
    for tick in ("0", "100"):
        r = CliRunner().invoke(simulate, [*base, "--sched-tick", tick])
        assert r.exit_code == 0, r.output
        jct[tick] = json.loads(r.stdout)["avg_jct_s"]
    # the reader starts the trace at 0: the job starts at its submit, or at the tick of 100
    assert jct == {"0": 50.0, "100": 150.0}
    r = CliRunner().invoke(simulate, [*base, "--sched-tick", "-1"])
    assert r.exit_code == 2 and "--sched-tick" in r.output
    r = CliRunner().invoke(simulate, [*base, "--sched-tick", "1", "--scheduler", "greedy"])
    assert r.exit_code == 1 and "needs scheduler 'slurm'" in r.output
