"""Gittins index against values computed by hand."""

import math

import pytest

from slurm_ext.policy import GittinsTable, gittins_index
from slurm_ext.policy.gittins import default_grid


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


# ---- per-GPU-class tables (gittins_classes = "gpus") -------------------------------------
# 1-GPU jobs finished at 30 and 30 GPU-s, 2-GPU jobs at 10 and 200. For fresh jobs (a=0):
#   pooled [10, 30, 30, 200]: D=10: (1/4)/10 = 0.025; D=30: (3/4)/25 = 0.03;
#                             D=200: 1/67.5 -> index 0.03 for both
#   1-GPU class [30, 30]:     D=30: 1/30 -> 0.0333
#   2-GPU class [10, 200]:    D=10: (1/2)/10 = 0.05; D=200: 1/105 -> 0.05
CLASS_HISTORY = [(1, 30.0), (2, 10.0), (1, 30.0), (2, 200.0)]


def test_gpu_classes_are_powers_of_two():
    from slurm_ext.policy import gpu_class
    from slurm_ext.policy.gittins import class_label

    assert [gpu_class(g) for g in (1, 2, 3, 4, 5, 8, 9, 16, 17)] == [0, 1, 2, 2, 3, 3, 4, 4, 5]
    assert [class_label(c) for c in (0, 1, 2, 4)] == ["1 GPU", "2 GPUs", "3-4 GPUs", "9-16 GPUs"]


def test_per_class_tables_by_hand():
    t = GittinsTable.from_history(CLASS_HISTORY, start=100.0, min_class_samples=2)
    assert t.samples == 4 and t.index(0.0) == pytest.approx(0.03)
    assert t.for_gpus(1).samples == 2 and t.for_gpus(1).index(0.0) == pytest.approx(1 / 30)
    assert t.for_gpus(2).index(0.0) == pytest.approx(0.05)
    # no 3-4 GPU history: that class reads the pooled table
    assert t.for_gpus(4) is t
    # a pooled table answers for every GPU count
    pooled = GittinsTable.from_samples([s for _, s in CLASS_HISTORY], start=100.0)
    assert pooled.for_gpus(2) is pooled and pooled.values == t.values


def test_class_with_too_few_samples_falls_back_to_pooled():
    hist = [*CLASS_HISTORY, (1, 30.0)]  # 3 one-GPU samples, 2 two-GPU ones
    t = GittinsTable.from_history(hist, start=100.0, min_class_samples=3)
    assert t.for_gpus(1) is not t and t.for_gpus(1).samples == 3
    assert t.for_gpus(2) is t  # 2 < 3 samples
    # samples without a GPU count only count in the pooled table
    t = GittinsTable.from_history([(None, 5.0), *CLASS_HISTORY], start=100.0, min_class_samples=2)
    assert t.samples == 5 and t.for_gpus(1).samples == 2 and t.for_gpus(2).samples == 2


def test_grid_points_are_round_so_whole_gpu_seconds_do_not_spike_the_index():
    # sacct gives whole GPU-seconds; a sample exactly on a grid point must not survive it
    # by an ulp (the old grid had 999.9999999999998 and 5999.999999999999 here)
    assert 1000.0 in default_grid(100, 4, 1e4) and 6000.0 in default_grid(60, 4, 1e5)
    table = GittinsTable.from_samples([1000, 2000], start=100, per_decade=4)
    assert max(table.values) == pytest.approx(1 / 222)  # at 1778: 1 done / 222 GPU-s left
    table = GittinsTable.from_samples([100, 6000, 30000], start=60, per_decade=4)
    assert max(table.values) < 0.01


def test_jobs_are_ordered_by_the_index_rounded_on_a_log_scale():
    from slurm_ext.policy.gittins import ranking_index

    assert ranking_index(0.0) == 0.0
    # 10 steps per decade: 0.0499 and 0.0501 are one rank (10 ** -1.3), 0.04 the next below
    assert ranking_index(0.0499) == ranking_index(0.0501) == pytest.approx(10**-1.3)
    assert ranking_index(0.04) == pytest.approx(10**-1.4)
    assert ranking_index(0.04) < ranking_index(0.0499)
    table = GittinsTable.from_samples([100.0, 200.0, 300.0], 10.0, 4)
    for a in (0.0, 150.0, 250.0):
        assert table.step(a)[0] == ranking_index(table.index(a))


def test_tables_a_hair_apart_do_not_reorder_jobs():
    """Two GPU classes whose tables differ by one sample rank their fresh jobs as equals
    (submit order), so a completion that nudges one table does not swap the classes."""
    from slurm_ext.core.model import JobView
    from slurm_ext.policy import PolicyConfig, rank

    base = [(1, 100.0 * (1 + i % 37)) for i in range(400)]
    cfg = PolicyConfig(queue_thresholds_gpu_s=[1e9], min_run_s=0, gittins_class_min_samples=200)
    jobs = [
        JobView(job_id=i, gpus=1 if i % 2 else 2, submit_time=float(i), attained_gpu_s=0)
        for i in range(10)
    ]
    orders = set()
    for extra in range(0, 400, 40):  # 2-GPU class: the same run times, 200 + a few more
        history = base + [(2, 100.0 * (1 + i % 37)) for i in range(200 + extra // 40)]
        table = rank(jobs, 10, cfg, history)
        assert len({round(d.index, 12) for d in table}) == 2  # exact indices do differ
        orders.add(tuple(d.job_id for d in table))
    assert orders == {tuple(range(10))}
