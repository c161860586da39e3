"""Conditioned Gittins (policy/kinds.py): per-kind groups, backoff, time-limit truncation,
the whole-job index. Values worked by hand."""

from dataclasses import replace

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import Completed, JobView
from slurm_ext.policy import GittinsTable, PolicyConfig, rank
from slurm_ext.policy.gittins import whole_job_indices

CFG = PolicyConfig(
    policy="gittins",
    queue_thresholds_gpu_s=[1e9],
    min_run_s=0,
    gittins_grid_start_gpu_s=1000.0,
    gittins_classes="pooled",
    gittins_kinds=["user+name", "user+gpus", "user"],
    gittins_kind_min_samples=3,
    gittins_time_limit=False,
    gittins_index="quantum",
)


def view(job_id, user="", name="", gpus=1, limit=None, attained=0.0, submit=0.0):
    return JobView(
        job_id=job_id,
        gpus=gpus,
        submit_time=submit,
        attained_gpu_s=attained,
        user=user,
        job_name=name,
        time_limit_s=limit,
    )


def by_id(decisions):
    return {d.job_id: d for d in decisions}


def test_backoff_follows_sample_counts():
    # alice/train: 2 samples (100 GPU-s each); alice 1-GPU: +2 of 300 -> 4; alice: +2-GPU
    # samples; bob: 3 samples of 900.
    history = [Completed(1, 100.0, "alice", "train")] * 2
    history += [Completed(1, 300.0, "alice", "eval")] * 2
    history += [Completed(2, 800.0, "alice", "big")] * 2
    history += [Completed(1, 900.0, "bob", "sim")] * 3
    jobs = [
        view(1, "alice", "train"),
        view(2, "alice", "new", gpus=2),
        view(3, "bob", "other"),
        view(4, "carol", "x"),
        view(5),
    ]
    d = by_id(rank(jobs, 0.0, CFG, history))
    # user+name alice/train has 2 < 3: backs off to user+gpus (alice, 1 GPU): 100, 100, 300, 300
    assert (d[1].group, d[1].group_samples) == ("user=alice,gpus=1 GPU", 4)
    # alice 2 GPUs: 2 samples < 3 -> user alice: all 6
    assert (d[2].group, d[2].group_samples) == ("user=alice", 6)
    assert (d[3].group, d[3].group_samples) == ("user=bob,gpus=1 GPU", 3)
    # unknown user, and no kind at all: the pooled history
    assert (d[4].group, d[4].group_samples) == ("pooled", 9)
    assert (d[5].group, d[5].group_samples) == ("pooled", 9)
    assert "from user=alice,gpus=1 GPU (4 completed jobs)" in d[1].reason
    # one more alice/train completion: the finest group has enough
    d = by_id(rank(jobs, 0.0, CFG, [*history, Completed(1, 100.0, "alice", "train")]))
    assert (d[1].group, d[1].group_samples) == ("user=alice,name=train", 3)
    # a group index is that group's own table: alice/train's three 100s give 1/100
    assert d[1].index == pytest.approx(1 / 100)
    # with min samples 1 every group counts
    d = by_id(rank(jobs, 0.0, replace(CFG, gittins_kind_min_samples=1), history))
    assert (d[1].group, d[1].group_samples) == ("user=alice,name=train", 2)


def test_never_run_jobs_of_different_kinds_differ():
    history = [Completed(1, 100.0, "alice", "short")] * 5 + [
        Completed(1, 9000.0, "bob", "long")
    ] * 5
    bob, alice = view(1, "bob", "long", submit=0.0), view(2, "alice", "short", submit=5.0)
    d = rank([bob, alice], 10.0, CFG, history)
    assert [x.job_id for x in d] == [2, 1]  # alice's short kind first, though submitted later
    assert d[0].index == pytest.approx(1 / 100) and d[1].index == pytest.approx(1 / 9000)
    # without kinds both read the pooled table: one index, submit order
    flat = replace(CFG, gittins_kinds=[])
    d = rank([bob, alice], 10.0, flat, history)
    assert [x.job_id for x in d] == [1, 2] and d[0].index == d[1].index
    assert d[0].group == "pooled" and d[0].group_samples == 10


def test_time_limit_truncates_the_distribution():
    # samples 1000, 2000, 6000 (a=0): D=1000: (1/3)/1000; D=2000: (2/3)/(5000/3) = 4e-4;
    # D=6000: 1/3000 -> 4e-4. Truncated at 3000 (limit 1500 s x 2 GPUs): 1000, 2000, 3000:
    # D=3000: 1/2000 = 5e-4 is the best.
    history = [Completed(2, s, "alice", "t") for s in (1000.0, 2000.0, 6000.0)]
    cfg = replace(CFG, gittins_time_limit=True)
    (free,) = rank([view(1, "alice", "t", gpus=2)], 0.0, cfg, history)
    (bounded,) = rank([view(1, "alice", "t", gpus=2, limit=1500.0)], 0.0, cfg, history)
    assert free.index == pytest.approx(4e-4) and bounded.index == pytest.approx(5e-4)
    assert "truncated at its time limit (3000 GPU-s)" in bounded.reason
    # off: the limit is ignored
    (off,) = rank([view(1, "alice", "t", gpus=2, limit=1500.0)], 0.0, CFG, history)
    assert off.index == pytest.approx(4e-4)
    # a limit above every sample changes nothing (no truncated table is built)
    (loose,) = rank([view(1, "alice", "t", gpus=2, limit=1e6)], 0.0, cfg, history)
    assert loose.index == pytest.approx(4e-4) and "truncated" not in loose.reason
    # past its bound (a requeued job's limit counts per run): the untruncated table
    # (3162 GPU-s is a grid point of the step function; only 6000 survives there)
    past = view(1, "alice", "t", gpus=2, limit=1500.0, attained=3162.0)
    (past,) = rank([past], 0.0, cfg, history)
    assert past.index == pytest.approx(1 / (6000 - 3162)) and "truncated" not in past.reason


def test_whole_job_index_is_one_over_expected_remaining():
    assert whole_job_indices([1.0, 2.0, 6.0], [0.0, 1.0, 2.5, 7.0]) == pytest.approx(
        [1 / 3, 1 / 3, 1 / 3.5, 0.0]  # E[S]=3; survivors 2, 6 at a=1: mean 3; 6 at 2.5
    )
    t = GittinsTable.from_samples([1.0, 2.0, 6.0], start=10.0, whole=True)
    assert t.values[0] == pytest.approx(1 / 3)
    # a kind that may finish fast but is long on average: the quantum index ranks it
    # first, the whole-job index by its mean
    history = [Completed(1, 100.0, "a", "gamble")] * 3 + [Completed(1, 20000.0, "a", "gamble")] * 3
    history += [Completed(1, 3000.0, "b", "steady")] * 6
    jobs = [view(1, "a", "gamble"), view(2, "b", "steady", submit=1.0)]
    assert [d.job_id for d in rank(jobs, 5.0, CFG, history)] == [1, 2]
    whole = replace(CFG, gittins_index="whole")
    d = rank(jobs, 5.0, whole, history)
    assert [x.job_id for x in d] == [2, 1] and d[0].index == pytest.approx(1 / 3000)


def test_auto_resolves_by_preemption():
    cfg = PolicyConfig()
    assert cfg.gittins_index == "auto"
    assert cfg.for_preemption(True).gittins_index == "quantum"
    assert cfg.for_preemption(False).gittins_index == "whole"
    assert replace(cfg, gittins_index="quantum").for_preemption(False).gittins_index == "quantum"


def test_bad_kind_groups_are_named():
    with pytest.raises(ConfigError, match="gittins_kinds.*user\\+project"):
        from_dict(PolicyConfig, {"tuning": {"gittins_kinds": ["user+project"]}}, None)
    with pytest.raises(ConfigError, match="repeats"):
        from_dict(PolicyConfig, {"tuning": {"gittins_kinds": ["user+user"]}}, None)
    with pytest.raises(ConfigError, match="gittins_kind_min_samples"):
        from_dict(PolicyConfig, {"gittins_kind_min_samples": 0}, None)


def test_groups_below_the_minimum_are_not_kept():
    from slurm_ext.policy import build_table

    history = [Completed(1, float(100 + i), f"u{i}", "n") for i in range(500)]
    history += [Completed(1, 50.0, "heavy", "n")] * 4
    table = build_table(history, replace(CFG, gittins_kind_min_samples=4))
    assert set(table.kinds.groups) == {
        ("user+name", ("heavy", "n")),
        ("user+gpus", ("heavy", 0)),
        ("user", ("heavy",)),
    }
