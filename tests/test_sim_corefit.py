"""cons_tres's node choice by free cores (`SimConfig.fit_cores`, `sim.corefit`): Slurm's
`_eval_nodes_consec` weighs a node's available CPUs, and a replay's job holds one CPU
per node whatever its GPUs, so a one-GPU job goes next to the most jobs, not into the
node with the fewest free GPUs (docs/simulator.md)."""

import json

import pytest
from click.testing import CliRunner

from slurm_ext.cli.sim import simulate
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.backfill import BackfillParams, Candidate, backfill_pass
from slurm_ext.sim.corefit import cores_fit, fits_evenly
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob

FIFO = PolicyConfig(policy="fifo")


def tj(i, gpus, submit, duration, limit=None):
    return TraceJob(
        job_id=i, gpus=gpus, submit_time=submit, duration_s=duration, time_limit_s=limit
    )


class Logged(Simulator):
    """A simulator that keeps each start's GPUs (a finished job's `alloc` is cleared)."""

    def _start(self, job, alloc, now):
        self.placed[job.id] = list(alloc)
        super()._start(job, alloc, now)


def run(trace, **cl):
    base = dict(nodes=2, gpus_per_node=4, preemptive=False, bf_interval_s=10_000.0)
    sim = Logged(trace, FIFO, SimConfig(**{**base, **cl}))
    sim.placed = {}
    jobs = {j.id: j for j in sim.run()}
    return sim.placed, jobs


def test_one_node_job_goes_to_the_fewest_free_cores_ties_first():
    offers = {"a": 1, "b": 2, "c": 4}
    # b runs two jobs (14 cores), a one (15): b, though a has fewer GPUs free
    assert cores_fit(offers, 1, 4, {"a": 15, "b": 14, "c": 16}) == [("b", 1)]
    assert cores_fit(offers, 1, 4, {"a": 15, "b": 15, "c": 15}) == [("a", 1)]  # a tie
    assert cores_fit(offers, 2, 4, {"a": 10, "b": 14, "c": 16}) == [("b", 2)]  # a too small
    assert cores_fit(offers, 3, 4, {"a": 1, "b": 1, "c": 16}) == [("c", 3)]
    assert cores_fit({"a": 2, "b": 2}, 3, 4, {"a": 16, "b": 16}) is None
    assert cores_fit({"a": 4}, 1, 4, {"a": 0}) is None  # no core left
    assert cores_fit({"a": 4}, 0, 4, {"a": 16}) is None


def test_the_tightest_run_of_usable_nodes_is_chosen_first():
    # usable a | b c (a, b, c can hold it, x cannot): run [a] has 15 cores, [b, c] 29,
    # so a, although c alone is tighter - cons_tres weighs the run before the node
    offers = {"a": 4, "x": 0, "b": 4, "c": 4}
    cores = {"a": 15, "x": 12, "b": 16, "c": 13}
    assert cores_fit(offers, 1, 4, cores) == [("a", 1)]


def test_whole_node_jobs_take_the_first_nodes_of_the_tightest_long_enough_run():
    offers = {"a": 4, "b": 4, "x": 1, "c": 4, "d": 4, "e": 4}
    cores = {"a": 16, "b": 16, "x": 10, "c": 14, "d": 15, "e": 16}
    assert cores_fit(offers, 8, 4, cores) == [("a", 4), ("b", 4)]  # 32 < 45
    assert cores_fit(offers, 12, 4, cores) == [("c", 4), ("d", 4), ("e", 4)]
    # no run long enough: the runs with the most cores first
    split = {"a": 4, "x": 0, "b": 4, "y": 0, "c": 4}
    assert cores_fit(split, 8, 4, {"a": 14, "b": 16, "c": 15}) == [("b", 4), ("c", 4)]
    assert cores_fit(split, 16, 4, {"a": 16, "b": 16, "c": 16}) is None
    assert fits_evenly(8, 4) and fits_evenly(3, 4) and not fits_evenly(6, 4)


def trace_fragments():
    # jobs 1 and 2 (1 GPU, long) on n0; job 3 (3 GPUs, short) on n1. Then job 4 (1 GPU):
    # n0 has 2 GPUs free and 2 jobs, n1 1 GPU free and 1 job
    return [
        tj(1, 1, 0, 1000),
        tj(2, 1, 1, 1000),
        tj(3, 3, 2, 10),
        tj(4, 1, 3, 1000),
        tj(5, 2, 4, 100),
    ]


def test_main_scheduler_places_by_free_cores_and_a_two_gpu_job_then_waits():
    placed, jobs = run(trace_fragments(), fit_cores=16)
    assert placed[1] == [("n0", 1)] and placed[2] == [("n0", 1)] and placed[3] == [("n1", 3)]
    assert placed[4] == [("n0", 1)]  # beside jobs 1 and 2: n0 has the fewest free cores
    # job 5 (2 GPUs) finds one GPU on each node: it waits for job 3's end (12)
    assert jobs[5].first_start == 12.0 and placed[5] == [("n1", 2)]
    # best fit on GPUs (the default): job 4 fills n1, job 5 starts at its submit on n0
    placed, jobs = run(trace_fragments())
    assert placed[4] == [("n1", 1)]
    assert jobs[5].first_start == 4.0 and placed[5] == [("n0", 2)]


def test_backfill_places_by_free_cores_and_counts_its_own_starts():
    params = BackfillParams(window_s=1000.0, resolution_s=1.0)
    pending = [Candidate(1, 1, True, 50.0), Candidate(2, 2, True, 50.0)]
    free = {"n0": 2, "n1": 1, "n2": 2}
    ends = {"n0": [(500.0, 2)], "n1": [(500.0, 3)], "n2": [(500.0, 2)]}

    def node_ends(n):
        return ends[n]

    # by GPUs: job 1 fills n1, job 2 takes n0
    assert backfill_pass(0.0, pending, free, node_ends, 4, params) == [
        (1, [("n1", 1)]),
        (2, [("n0", 2)]),
    ]
    # by cores: n0 runs 2 jobs (14 cores), n1 one (15), n2 one: job 1 goes to n0; then
    # job 2 needs 2 GPUs: only n2 has them
    cores = {"n0": 14, "n1": 15, "n2": 15}
    assert backfill_pass(0.0, pending, free, node_ends, 4, params, fit_cores=cores) == [
        (1, [("n0", 1)]),
        (2, [("n2", 2)]),
    ]
    assert cores == {"n0": 14, "n1": 15, "n2": 15}  # the caller's map is not changed


def test_fit_cores_is_slurms_and_not_negative():
    with pytest.raises(ValueError, match="fit_cores"):
        SimConfig(fit_cores=-1)
    with pytest.raises(ValueError, match="scheduler 'slurm'"):
        SimConfig(fit_cores=16, scheduler="greedy")
    assert SimConfig().fit_cores == 0  # off by default: best fit on free GPUs


def test_a_reservation_takes_its_nodes_whole_when_asked():
    # B (3 GPUs) is blocked and reserved on n0 from 100 (when n0's 2-GPU job ends); C
    # (1 GPU, long) fits now beside it by GPUs (n0 keeps 1 GPU free after 100), but
    # Slurm's backfill map is a node bitmap: n0 is off limits for C from 100
    pending = [Candidate(1, 3, True, 500.0), Candidate(2, 1, True, 1000.0)]
    free = {"n0": 2, "n1": 0}
    ends = {"n0": [(100.0, 2)], "n1": [(1000.0, 4)]}
    reserved = []

    def go(**kw):
        reserved.clear()
        params = BackfillParams(window_s=5000.0, resolution_s=1.0, **kw)
        on = lambda j, s: reserved.append((j, s))  # noqa: E731
        return backfill_pass(0.0, pending, free, ends.__getitem__, 4, params, on_reserve=on)

    assert go() == [(2, [("n0", 1)])] and reserved == [(1, 100.0)]
    assert go(whole_nodes=True) == [] and reserved == [(1, 100.0)]


def test_simulate_bf_whole_nodes_option(tmp_path):
    # 2 x 4 GPUs: job 1 fills n0 until 1000, job 2 holds 2 GPUs of n1 until 100; job 3
    # (3 GPUs) is blocked and reserved on n1 from 100; job 4 (1 GPU, 1000 s) fits on n1
    # now by GPUs (1 free beside job 3 after 100), but not where the reservation takes
    # n1 whole: it then starts at 100 beside job 3 (JCT 998 -> 1098 s, the mean +25 s)
    csv = tmp_path / "t.csv"
    rows = ["1,4,0,1000,1000", "2,2,0,100,100", "3,3,1,100,200", "4,1,2,1000,1000"]
    csv.write_text("job_id,num_gpu,submit_time,duration,time_limit\n" + "\n".join(rows) + "\n")
    base = ["--trace", str(csv), "--nodes", "2", "--gpus-per-node", "4", "--policy", "fifo"]
    base += ["--no-preemptive", "--bf-interval", "1", "--bf-resolution", "1", "--json"]
    jct = {}
    for flag in ("--bf-gpu-reservations", "--bf-whole-nodes"):
        r = CliRunner().invoke(simulate, [*base, flag])
        assert r.exit_code == 0, r.output
        jct[flag] = json.loads(r.stdout)["avg_jct_s"]
    assert jct == {"--bf-gpu-reservations": 574.75, "--bf-whole-nodes": 599.25}
    r = CliRunner().invoke(simulate, [*base, "--bf-whole-nodes", "--scheduler", "greedy"])
    assert r.exit_code == 1 and "bf_whole_nodes" in r.output and "'greedy'" in r.output


@pytest.mark.parametrize("scheduler", ["greedy", "strict"])
def test_whole_node_reservations_need_the_slurm_scheduler(scheduler):
    with pytest.raises(ValueError, match="bf_whole_nodes .* needs scheduler 'slurm'"):
        SimConfig(scheduler=scheduler, bf_whole_nodes=True)
    assert SimConfig(scheduler="slurm", bf_whole_nodes=True).bf_whole_nodes
