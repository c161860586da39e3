"""The time-limit model for traces without limits: seeded, stable per job, never below run time."""

from __future__ import annotations

import statistics

import pytest

from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.timelimits import MODAL_LIMITS_S, PARTITION_MAX_S, fill_time_limits


def test_limits_cover_run_time_and_are_round_values():
    jobs = fill_time_limits(synth_jobs(2000, 64, seed=3), seed=7)
    allowed = set(MODAL_LIMITS_S) | {PARTITION_MAX_S}
    for j in jobs:
        assert j.time_limit_s >= j.duration_s
        assert j.time_limit_s in allowed or j.time_limit_s == j.duration_s


def test_over_estimates_are_large_and_spread():
    jobs = fill_time_limits(synth_jobs(4000, 64, seed=1), seed=1)
    factors = sorted(j.time_limit_s / j.duration_s for j in jobs)
    median = statistics.median(factors)
    assert 5 < median < 200, median
    at_max = sum(j.time_limit_s == PARTITION_MAX_S for j in jobs) / len(jobs)
    assert 0.2 < at_max < 0.45, at_max


def test_same_job_same_limit_whatever_the_subset():
    jobs = synth_jobs(500, 64, seed=2)
    whole = {j.job_id: j.time_limit_s for j in fill_time_limits(jobs, seed=5)}
    part = {j.job_id: j.time_limit_s for j in fill_time_limits(jobs[100:200], seed=5)}
    assert all(whole[i] == v for i, v in part.items())
    other = {j.job_id: j.time_limit_s for j in fill_time_limits(jobs, seed=6)}
    assert other != whole


def test_given_limits_are_kept():
    jobs = synth_jobs(10, 8, seed=0)
    from dataclasses import replace

    jobs[0] = replace(jobs[0], time_limit_s=123.0)
    assert fill_time_limits(jobs)[0].time_limit_s == 123.0


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="max_factor"):
        fill_time_limits([], max_factor=0.5)
    with pytest.raises(ValueError, match="p_max"):
        fill_time_limits([], p_max=2)
