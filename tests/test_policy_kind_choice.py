"""`gittins_kind_choice = "tightest"` (policy/kinds.py): a job reads the least spread of
its groups, the pooled history included, so a group that narrows nothing falls back to
the pooled table (submit order among such jobs). Values worked by hand."""

from dataclasses import replace

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import Completed, JobView
from slurm_ext.policy import PolicyConfig, rank
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.users import UserModel, synth_user_jobs

CFG = PolicyConfig(
    policy="gittins",
    queue_thresholds_gpu_s=[1e9],
    min_run_s=0,
    gittins_grid_start_gpu_s=10.0,
    gittins_classes="pooled",
    gittins_kinds=["user+name", "user+gpus", "user"],
    gittins_kind_min_samples=3,
    gittins_time_limit=False,
    gittins_index="quantum",
)
TIGHT = replace(CFG, gittins_kind_choice="tightest")
# alice mixes two unrelated kinds (100 and 10,000 GPU-s): log variance 6.36, more than
# the pooled history's 3.97 (bob's 1,000s sit between); bob's kind never varies (0)
HISTORY = (
    [Completed(1, 100.0, "alice", "a")] * 3
    + [Completed(1, 10000.0, "alice", "b")] * 3
    + [Completed(1, 1000.0, "bob", "sim")] * 3
)


def view(job_id, user, name, submit, gpus=1):
    return JobView(job_id=job_id, gpus=gpus, submit_time=submit, user=user, job_name=name)


def test_spread_group_falls_back_to_pooled_in_submit_order():
    jobs = [view(1, "carol", "x", 0.0), view(2, "alice", "new", 5.0), view(3, "bob", "sim", 9.0)]
    d = {x.job_id: x for x in rank(jobs, 10.0, CFG, HISTORY)}
    # finest: alice's new job reads her 1-GPU jobs (a 0.5 chance of 100: index 0.005),
    # ahead of carol's pooled 3/9 chance of 100 (0.0033), though carol came first
    assert d[2].group == "user=alice,gpus=1 GPU" and d[2].index == pytest.approx(0.005)
    assert d[1].group == "pooled" and d[1].index == pytest.approx(1 / 300)
    assert d[2].rank < d[1].rank
    t = {x.job_id: x for x in rank(jobs, 10.0, TIGHT, HISTORY)}
    # tightest: alice's groups (6.36) are wider than the pooled history (3.97): pooled,
    # the same index as carol's, so submit order; explain says what it passed over
    assert t[2].group == "pooled, its GPU-times tighter than user=alice,gpus=1 GPU's"
    assert t[2].index == pytest.approx(t[1].index) and t[2].group_samples == 9
    assert t[1].rank < t[2].rank
    assert "from pooled, its GPU-times tighter than user=alice,gpus=1 GPU's" in t[2].reason
    # bob's kind (variance 0) is the tightest: still his own group, 1 / 1000 (last)
    assert t[3].group == "user=bob,name=sim" and t[3].index == pytest.approx(1 / 1000)
    assert t[3].rank == 2 and d[3].group == t[3].group


def test_class_table_beats_a_spread_user_group():
    # with per-GPU-class tables: alice's 1-GPU mix vs the 1-GPU class (bob's 1,000s and
    # carol's 1,200s, tight) vs pooled (everything, 4-GPU jobs too): the class wins
    history = [*HISTORY, *[Completed(1, 1200.0, "carol", "c")] * 3]
    history += [Completed(4, 40000.0, "dave", "w")] * 3
    cfg = replace(TIGHT, gittins_classes="gpus", gittins_class_min_samples=3)
    d = {x.job_id: x for x in rank([view(1, "alice", "new", 0.0)], 1.0, cfg, history)}
    # log variances: alice 6.36; 1-GPU class (12 samples) 3.04; pooled (15) 4.74
    assert d[1].group.startswith("1 GPU class,") and d[1].group_samples == 12
    d = {
        x.job_id: x
        for x in rank(
            [view(1, "alice", "new", 0.0)], 1.0, replace(cfg, gittins_kind_choice="finest"), history
        )
    }
    assert d[1].group == "user=alice,gpus=1 GPU"


def test_bad_choice_is_named():
    with pytest.raises(ConfigError, match="gittins_kind_choice"):
        from_dict(PolicyConfig, {"gittins_kind_choice": "best"}, None)


def test_simulator_reads_the_same_rule():
    trace = synth_user_jobs(400, 16, load=1.2, seed=3, model=UserModel(p_oneoff=0.9))
    cl = SimConfig(nodes=2, gpus_per_node=8, preemptive=False, seed=3)

    def finishes(cfg):
        return [j.finish for j in sorted(Simulator(trace, cfg, cl).run(), key=lambda j: j.id)]

    base = finishes(PolicyConfig())
    assert finishes(PolicyConfig()) == base  # deterministic
    assert finishes(PolicyConfig(gittins_kind_choice="tightest")) != base
