"""benchmarks/studies/fidelity.py's distributions (the 10 % target read on means): the
simulated ensemble's perturbations are inputs only (timer phase, submit lag, launch
overhead), and the live side's repeats and the comparison of means read the runs they
are given."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.studies import fidelity
from benchmarks.studies.fidelity_ctld import LOG, ctld_times, launch_extras, submit_lags
from benchmarks.studies.fidelity_ensemble import Draws, Spread, perturb, pooled, timer_span_s
from benchmarks.studies.fidelity_tables import Cell, summary
from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.run import simulate
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import fill_time_limits

REPO = Path(__file__).resolve().parents[1]

SPEEDUP = 1500.0


def jobs(n: int = 40) -> list:
    return fill_time_limits(synth_jobs(n, 16, 1.0, 2), 0)


def cluster(**kw) -> SimConfig:
    base = dict(
        nodes=4,
        gpus_per_node=4,
        preemptive=False,
        bf_interval_s=SPEEDUP,
        bf_willrun_window_s=30 * SPEEDUP,
        pass_interval_s=2.2 * SPEEDUP,
        clock_s=SPEEDUP,
    )
    return SimConfig(**{**base, **kw})


def test_shift_moves_every_submit_alike_below_the_longest_timer():
    trace, cl = jobs(), cluster()
    draws = Draws(SPEEDUP, ("shift",))
    shifts = set()
    for member in range(5):
        out = {j.job_id: j for j in perturb(trace, cl, draws, 0, member).jobs}
        moved = {round(out[j.job_id].submit_time - j.submit_time, 6) for j in trace}
        assert len(moved) == 1  # one shift for the whole trace
        (shift,) = moved
        assert 0.0 <= shift < timer_span_s(cl) == 30 * SPEEDUP
        assert all(out[j.job_id].duration_s == j.duration_s for j in trace)
        shifts.add(shift)
    assert len(shifts) == 5  # each member its own phase


def test_sim_inputs_give_the_main_scheduler_its_whole_second_tick():
    args = dict(
        nodes=4, gpus_per_node=4, preemptible_fraction=0.5, seed=0, scheduler="slurm",
        willrun=True, checkpoint_interval=1800.0, requeue_hold=True, slurm_clock=True,
        sched_tick=True, core_fit=True, whole_nodes=True,
    )  # fmt: skip
    _, cl = fidelity.sim_inputs(jobs(), argparse.Namespace(**args), "slurm", SPEEDUP)
    assert cl.sched_tick_s == SPEEDUP  # 1 wall s
    assert cl.fit_cores == 16  # the replay's 16-core nodes (replay.target.local)
    assert cl.bf_whole_nodes  # backfill's node bitmap
    ns = argparse.Namespace(**{**args, "whole_nodes": False})  # --gpu-resv
    assert not fidelity.sim_inputs(jobs(), ns, "slurm", SPEEDUP)[1].bf_whole_nodes
    for off in (dict(sched_tick=False), dict(scheduler="greedy")):
        ns = argparse.Namespace(**{**args, **off})
        assert fidelity.sim_inputs(jobs(), ns, "slurm", SPEEDUP)[1].sched_tick_s == 0.0
    for off in (dict(core_fit=False), dict(scheduler="greedy")):  # --gpu-fit
        ns = argparse.Namespace(**{**args, **off})
        assert fidelity.sim_inputs(jobs(), ns, "slurm", SPEEDUP)[1].fit_cores == 0
    # the ensemble's shift draws the tick's phase too
    assert timer_span_s(cluster(sched_tick_s=40 * SPEEDUP)) == 40 * SPEEDUP


def test_a_shift_changes_nothing_without_timers():
    """Greedy scheduling at every event, exact clock: no phase to move, so the shifted
    runs give the unperturbed avg JCT; with Slurm's timers they need not."""
    trace = jobs()
    policy = replace(PolicyConfig(), policy="gittins")
    flat = cluster(scheduler="greedy", pass_interval_s=0.0, clock_s=0.0)
    base = simulate(trace, policy, flat)[0]["avg_jct_s"]
    draws = Draws(SPEEDUP, ("shift",))
    for member in range(3):
        got = simulate(perturb(trace, flat, draws, 0, member).jobs, policy, flat)[0]["avg_jct_s"]
        assert got == pytest.approx(base, rel=1e-9)


def test_submit_lags_keep_trace_order_and_bound():
    trace, cl = jobs(), cluster()
    draws = Draws(SPEEDUP, ("submit",), lags_s=(0.0, 0.1, 0.5))
    out = perturb(trace, cl, draws, 0, 1).jobs
    by = {j.job_id: j for j in trace}
    lags = [j.submit_time - by[j.job_id].submit_time for j in out]
    assert all(lag >= 0 for lag in lags) and max(lags) > 0
    in_order = sorted(trace, key=lambda j: (j.submit_time, j.job_id))
    assert [j.job_id for j in out] == [j.job_id for j in in_order]
    times = [j.submit_time for j in out]
    assert times == sorted(times)  # sbatch one at a time: none overtakes an earlier one
    # a lag other than a drawn one only where an earlier job's arrival pushed it
    drawn = {0.0, 0.1 * SPEEDUP, 0.5 * SPEEDUP}
    for prev, job, lag in zip(out, out[1:], lags[1:]):
        assert round(lag, 6) in drawn or job.submit_time == prev.submit_time


def test_launch_draws_come_from_the_measured_extras():
    trace, cl = jobs(), cluster()
    extras = (0.1, 0.9)
    draws = Draws(SPEEDUP, ("launch",), launch_mean_s=0.5, launch_extras_s=extras)
    out = {j.job_id: j for j in perturb(trace, cl, draws, 0, 0).jobs}
    long = [j for j in trace if j.duration_s > 0.4 * SPEEDUP + 1]
    deltas = {round((out[j.job_id].duration_s - j.duration_s) / SPEEDUP, 6) for j in long}
    assert deltas == {-0.4, 0.4}
    # a job shorter than a drawn shortfall keeps a second of work
    assert all(out[j.job_id].duration_s >= 1.0 for j in trace)
    assert all(out[j.job_id].submit_time == j.submit_time for j in trace)


def test_draws_are_seeded_per_member_and_stream():
    trace, cl = jobs(), cluster()
    every = Draws(SPEEDUP, lags_s=(0.0, 0.2), launch_mean_s=0.3, launch_extras_s=(0.0, 0.3, 0.7))
    a = perturb(trace, cl, every, 0, 3).jobs
    assert a == perturb(trace, cl, every, 0, 3).jobs
    assert a != perturb(trace, cl, every, 0, 4).jobs
    assert a != perturb(trace, cl, every, 1, 3).jobs
    # leaving the launch draw out keeps the shift and the lags drawn
    no_launch = perturb(trace, cl, replace(every, which=("shift", "submit")), 0, 3).jobs
    assert [j.submit_time for j in no_launch] == [j.submit_time for j in a]


def test_rank_lag_holds_a_job_until_the_next_pass_and_counts_it():
    """`rank`: a job is seen at the first pass tick after its arrival (service modes
    only), and its JCT still runs from its arrival."""
    trace = jobs()
    policy = replace(PolicyConfig(), policy="gittins")
    cl = cluster()
    period = cl.pass_interval_s
    member = perturb(trace, cl, Draws(SPEEDUP, ("rank",)), 0, 0)
    by = {j.job_id: j for j in trace}
    for j in member.jobs:
        ticks = j.submit_time / period
        assert ticks == pytest.approx(round(ticks), abs=1e-9)  # on a pass tick
        lag = member.ranked_after[j.job_id]
        assert 0.0 <= lag < period
        assert j.submit_time - lag == pytest.approx(by[j.job_id].submit_time)
    ran = simulate(member.jobs, policy, cl)[1]
    plain = sum(j.finish - j.submit for j in ran) / len(ran)
    lags = sum(member.ranked_after.values()) / len(ran)
    assert member.avg_jct_s(ran) == pytest.approx(plain + lags)
    # without a pass period (Slurm alone) there is nothing to wait for
    alone = perturb(trace, cluster(pass_interval_s=0.0), Draws(SPEEDUP, ("rank",)), 0, 0)
    assert alone.ranked_after == {} and alone.jobs == sorted(
        trace, key=lambda j: (j.submit_time, j.job_id)
    )


def test_a_members_avg_jct_is_the_simulators_without_rank_lag():
    trace, cl = jobs(), cluster()
    policy = replace(PolicyConfig(), policy="gittins")
    member = perturb(trace, cl, Draws(SPEEDUP, ("shift",)), 0, 2)
    out, ran = simulate(member.jobs, policy, cl)
    assert member.avg_jct_s(ran) == pytest.approx(out["avg_jct_s"], rel=1e-12)


def test_unknown_perturbation_is_refused():
    with pytest.raises(ValueError, match="unknown perturbation.*phase"):
        Draws(SPEEDUP, ("shift", "phase"))


def test_spread_percentile_and_pool():
    s = Spread((10.0, 20.0, 30.0, 40.0))
    assert (s.mean, s.low, s.high) == (25.0, 10.0, 40.0)
    assert s.percentile(5.0) == 0.0
    assert s.percentile(45.0) == 100.0
    assert s.percentile(20.0) == 37.5  # one below, one tie
    assert pooled([s, Spread((50.0,))]).values == (10.0, 20.0, 30.0, 40.0, 50.0)


def test_summary_reads_the_target_on_the_means():
    def cell(mode, run, live, ens):
        row = {"sim_min_s": 0.0, "sim_max_s": 0.0}
        return Cell("t", 10, SPEEDUP, mode, run, live, ens[0], row, Spread(ens))

    cells = [
        cell("slurm", "r1", 100.0, (95.0, 105.0)),
        cell("slurm", "r2", 130.0, (100.0, 100.0)),  # one run off by 30 %, the mean 15 %
        cell("service", "r1", 90.0, (100.0, 100.0)),
        cell("service", "r2", 100.0, (100.0, 100.0)),
    ]
    rows = {s["mode"]: s for s in summary(cells)}
    assert rows["slurm"]["live_mean"] == 115.0
    assert rows["slurm"]["ratio"] == pytest.approx(1.15) and not rows["slurm"]["met"]
    assert rows["slurm"]["percentiles"] == [50.0, 100.0]
    assert rows["service"]["ratio"] == pytest.approx(0.95) and rows["service"]["met"]


def write_run(mode_dir: Path, trace, lag: dict, launch: dict, requeued: int) -> None:
    """A replay's records.json and slurmctld log in 22.05's words, from given lags and
    launches (wall s; the log keeps milliseconds, sacct whole seconds)."""
    epoch = 1_800_000_000.25
    log, records = [], {}

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t).isoformat(timespec="milliseconds")

    for sid, t in enumerate(trace, 1):
        submit = epoch + t.submit_time / SPEEDUP + lag[t.job_id]
        start = submit + 0.5
        end = start + t.duration_s / SPEEDUP + launch[t.job_id]
        log += [
            (submit, f"_slurm_rpc_submit_batch_job: JobId={sid} InitPrio=1000 usec=700"),
            (start, f"sched/backfill: _start_job: Started JobId={sid} in gpu on node1"),
            (end, f"_job_complete: JobId={sid} WEXITSTATUS 0"),
            (end, f"_job_complete: JobId={sid} done"),
        ]
        records[str(t.job_id)] = {
            "slurm_id": sid,
            "submit": float(int(submit)),
            "state": "COMPLETED",
            "runs": [[float(int(start)), float(int(end))]],
            "requeues": int(t.job_id == requeued),
        }
    (mode_dir / LOG).parent.mkdir(parents=True)
    lines = [f"[{stamp(t)}] {msg}" for t, msg in sorted(log, key=lambda e: e[0])]
    (mode_dir / LOG).write_text("\n".join(["[2026-11-24T07:43:01.601] noise", *lines]) + "\n")
    (mode_dir / "records.json").write_text(json.dumps(records))


def test_launch_and_lags_read_to_the_millisecond_from_slurmctlds_log(tmp_path):
    trace = jobs(8)
    lag = {t.job_id: 0.01 * i for i, t in enumerate(trace)}
    launch = {t.job_id: 0.1 + 0.02 * i for i, t in enumerate(trace)}
    write_run(tmp_path, trace, lag, launch, requeued=trace[0].job_id)
    times = ctld_times(tmp_path / LOG)
    assert sorted(times.submit) == list(range(1, 9)) and len(times.ends[1]) == 1
    got = launch_extras([tmp_path], trace, SPEEDUP)
    # the requeued job is left out; the rest to the log's millisecond
    want = [launch[t.job_id] for t in trace[1:]]
    assert got == pytest.approx(want, abs=2e-3)
    lags = submit_lags(tmp_path, trace, SPEEDUP)
    assert lags == pytest.approx([lag[t.job_id] for t in trace], abs=2e-3)
    # no log: None (the caller falls back to sacct's stamps), no lags
    other = tmp_path / "other"
    other.mkdir()
    assert launch_extras([tmp_path, other], trace, SPEEDUP) is None
    assert submit_lags(other, trace, SPEEDUP) == []


def test_live_dirs_repeats_and_live_from(tmp_path):
    def args(**kw):
        return fidelity.argparse.Namespace(**{"live_from": None, "repeats": 1, **kw})

    assert fidelity.live_dirs(args(), tmp_path) == [(tmp_path, tmp_path)]
    assert fidelity.live_dirs(args(repeats=2), tmp_path) == [
        (tmp_path / "r1", tmp_path / "r1"),
        (tmp_path / "r2", tmp_path / "r2"),
    ]
    got = fidelity.live_dirs(args(live_from="/a,/b"), tmp_path)
    assert got == [(Path("/a"), tmp_path / "r1"), (Path("/b"), tmp_path / "r2")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--sim-ensemble", "-1"], "--sim-ensemble >= 0"),
        (["--perturb", "shift,clock"], "--perturb: unknown clock"),
        (["--live-from", "/x", "--repeats", "2"], "comma-separated"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(argv, message):
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks.studies.fidelity", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert message in res.stderr
