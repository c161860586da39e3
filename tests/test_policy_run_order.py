"""`gittins_whole_order`: the whole-job index ordered by expected run time instead of
GPU-time (policy/run_order.py), in the policy's keys, its reasons, and the simulator's
incremental order. Values worked by hand."""

from dataclasses import replace

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import Completed, JobView
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.policy.ranking import GUARDED, key_and_change
from slurm_ext.policy.run_order import ordered_index
from slurm_ext.policy.tables import build_table
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.users import synth_user_jobs

CFG = PolicyConfig(
    queue_thresholds_gpu_s=[1e9],
    min_run_s=0,
    gittins_classes="pooled",
    gittins_kinds=["user+name"],
    gittins_kind_min_samples=3,
    gittins_time_limit=False,
    gittins_index="whole",
    wait_guard_factor=0,
)
RUN_TIME = replace(CFG, gittins_whole_order="run_time")
# a wide kind of 1 h runs (16 GPUs: 57,600 GPU-s) and a narrow one of 4 h (14,400 GPU-s)
HISTORY = [Completed(16, 16 * 3600.0, "w", "wide")] * 4
HISTORY += [Completed(1, 4 * 3600.0, "n", "narrow")] * 4


def job(job_id, user, name, gpus, submit=0.0):
    return JobView(job_id, gpus, submit, user=user, job_name=name, waiting_since=submit)


def test_run_time_order_puts_a_short_wide_job_before_a_long_narrow_one():
    jobs = [job(1, "n", "narrow", 1), job(2, "w", "wide", 16, submit=1.0)]
    by_gpu_time = rank(jobs, 10.0, CFG, HISTORY)
    assert [d.job_id for d in by_gpu_time] == [1, 2]  # 14,400 GPU-s before 57,600
    by_run = rank(jobs, 10.0, RUN_TIME, HISTORY)
    assert [d.job_id for d in by_run] == [2, 1]  # 1 h before 4 h
    # Decision.index stays the Gittins index itself; the reason says what the key reads
    wide = by_run[0]
    assert wide.index == pytest.approx(1 / (16 * 3600.0))
    assert "ordered by predicted run time: 3600 s (GPU-time / 16 GPUs)" in wide.reason
    assert "predicted run time" not in by_gpu_time[1].reason


def test_run_time_order_applies_only_to_the_whole_job_index():
    """With preemption (the quantum index) a never-run wide job would outrank every
    running job by its width alone: the knob is ignored there."""
    jobs = [job(1, "n", "narrow", 1), job(2, "w", "wide", 16, submit=1.0)]
    quantum = replace(RUN_TIME, gittins_index="quantum")
    assert [d.job_id for d in rank(jobs, 10.0, quantum, HISTORY)] == [1, 2]
    auto = replace(RUN_TIME, gittins_index="auto")
    assert auto.for_preemption(True).gittins_index == "quantum"
    assert [d.job_id for d in rank(jobs, 10.0, auto.for_preemption(False), HISTORY)] == [2, 1]
    assert ordered_index(0.5, 16, quantum) == 0.5
    assert ordered_index(0.5, 16, RUN_TIME) == 8.0
    assert ordered_index(0.5, 16, replace(RUN_TIME, policy="las")) == 0.5


def test_the_wait_guard_fires_at_the_same_wait_under_either_order():
    """The guard's unit is the predicted run (GPU-time over GPUs) in both orders."""
    table = build_table(HISTORY, CFG)
    guarded = replace(CFG, wait_guard_factor=2.0)
    afters = []
    for cfg in (guarded, replace(guarded, gittins_whole_order="run_time")):
        args = (cfg, table, 0.0, 2, 16, 0.0, 0.0, 0.0, False, 0.0, 0.0, None, None, "w", "wide")
        (_, _, score, _, _), after = key_and_change(*args)
        assert score != GUARDED
        afters.append(after)
        late = (cfg, table, after * 1.001, *args[3:])
        assert key_and_change(*late)[0][2] == GUARDED
    # 2 x the predicted run of 1 h (the key reads the index rounded to its grid:
    # `gittins.ranking_index`, 10**-4.8 here), the same under both orders
    assert afters[0] == afters[1] == pytest.approx(2 / (10**-4.8 * 16))


def test_config_rejects_an_unknown_order():
    cfg = from_dict(PolicyConfig, {"gittins_whole_order": "run_time"}, None)
    assert cfg.gittins_whole_order == "run_time"
    with pytest.raises(ConfigError, match="gittins_whole_order"):
        from_dict(PolicyConfig, {"gittins_whole_order": "runtime"}, None)


def test_simulator_keeps_the_order_rank_computes():
    """The simulator's incremental heaps hold the keys `rank` sorts by, with the knob on
    (the service ranks with `rank`, so both shells order alike)."""
    trace = synth_user_jobs(300, 16, load=1.3, seed=5)
    cfg = PolicyConfig(gittins_whole_order="run_time")
    checked: list[float] = []
    reordered: list[bool] = []

    def check(sim, now):
        if len(checked) % 5 == 0 and sim.table is not None:
            want = rank(sim.views(now), now, sim.cfg, sim.table)
            assert sim.order() == [d.job_id for d in want], f"t={now}"
            plain = rank(
                sim.views(now), now, replace(sim.cfg, gittins_whole_order="gpu_time"), sim.table
            )
            reordered.append([d.job_id for d in plain] != [d.job_id for d in want])
        checked.append(now)

    sim = Simulator(
        trace, cfg, SimConfig(nodes=2, gpus_per_node=8, preemptive=False), on_pass=check
    )
    assert sim.cfg.gittins_index == "whole"
    sim.run()
    assert len(reordered) > 20 and any(reordered)  # the knob did change the order


def test_the_age_guard_ages_the_run_time_order():
    """Guard "age" doubles the value the key sorts by, so the run-time order survives
    it (it used to re-read the bare index and drop the order)."""
    table = build_table(HISTORY, CFG)
    for cfg, per in ((CFG, 1), (RUN_TIME, 16)):
        aged = replace(cfg, wait_guard="age", wait_guard_factor=2.0)
        args = (aged, table, 0.0, 2, 16, 0.0, 0.0, 0.0, False, 0.0, 0.0, None, None, "w", "wide")
        (_, _, fresh, _, _), unit = key_and_change(*args)
        (_, _, older, _, _), _ = key_and_change(aged, table, unit * 1.5, *args[3:])
        assert older == 2 * fresh and fresh == -per * 10**-4.8
