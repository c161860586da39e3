"""Gittins index against values computed by hand."""

import math

import pytest

from slurm_ext.policy import GittinsTable, gittins_index


def test_index_by_hand_at_zero():
    # samples 1, 2, 6. a=0, all survive.
    # D=1: P=1/3, E[min(S,1)]=1        -> 1/3
    # D=2: P=2/3, E[min(S,2)]=(1+2+2)/3 -> 0.4
    # D=6: P=1,   E[S]=3               -> 1/3
    assert gittins_index([1.0, 2.0, 6.0], 0.0) == pytest.approx(0.4)


def test_index_by_hand_after_attained_service():
    # a=1: survivors 2, 6 (S-a = 1, 5).
    # D=1: P=1/2, E[min(S-a,1)]=1      -> 0.5
    # D=5: P=1,   E[S-a]=3             -> 1/3
    assert gittins_index([1.0, 2.0, 6.0], 1.0) == pytest.approx(0.5)
    # a=2.5: only 6 survives: P=1 at D=3.5 -> 1/3.5
    assert gittins_index([1.0, 2.0, 6.0], 2.5) == pytest.approx(1 / 3.5)


def test_ties_finish_together():
    # samples 2, 2, 10 at a=0: D=2: P=2/3, E=2 -> 1/3; D=10: P=1, E=14/3 -> 3/14
    assert gittins_index([2.0, 2.0, 10.0], 0.0) == pytest.approx(1 / 3)


def test_outlived_every_sample_is_zero():
    assert gittins_index([1.0, 2.0], 5.0) == 0.0


def test_table_is_a_step_function_on_its_grid():
    samples = [100.0, 200.0, 5000.0, 80000.0]
    t = GittinsTable.from_samples(samples, start=60.0, per_decade=4)
    assert t.grid[0] == 0.0 and t.samples == 4
    ordered = sorted(samples)
    for g, v in zip(t.grid, t.values, strict=True):
        assert v == pytest.approx(gittins_index(ordered, g))
    mid = (t.grid[3] + t.grid[4]) / 2
    assert t.index(mid) == t.values[3]
    assert t.next_change_gpu_s(mid) == t.grid[4]
    assert t.next_change_gpu_s(t.grid[-1] + 1) == math.inf
    assert t.index(1e9) == 0.0


def test_empty_history_table():
    t = GittinsTable.from_samples([])
    assert t.samples == 0 and t.index(123.0) == 0.0
