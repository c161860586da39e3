"""Ranking: LAS order, Gittins queues, starvation promotion, baselines, no oracle leak."""

import random
from dataclasses import replace

import pytest

from slurm_ext.core.config import ConfigError, from_dict
from slurm_ext.core.model import JobView
from slurm_ext.policy import (
    GUARDED,
    GittinsTable,
    PolicyConfig,
    key_and_change,
    key_change_after,
    rank,
)


def ids(decisions):
    return [d.job_id for d in decisions]


def test_config_from_dict_validates_choices():
    data = {"policy": "las", "tuning": {"queue_thresholds_gpu_s": [10, 100]}}
    cfg = from_dict(PolicyConfig, data, None)
    assert cfg.policy == "las" and cfg.queue_thresholds_gpu_s == [10.0, 100.0]
    with pytest.raises(ConfigError, match="policy"):
        from_dict(PolicyConfig, {"policy": "lottery"}, None)
    with pytest.raises(ConfigError, match="increasing"):
        from_dict(PolicyConfig, {"tuning": {"queue_thresholds_gpu_s": [100, 10]}}, None)


def test_las_orders_by_queue_then_fifo():
    cfg = PolicyConfig(
        policy="las", queue_thresholds_gpu_s=[100.0, 1000.0], min_run_s=0, queue_gpu_exponent=0
    )
    jobs = [
        JobView(job_id=1, gpus=4, submit_time=0, attained_gpu_s=400),  # queue 1
        JobView(job_id=2, gpus=1, submit_time=5, attained_gpu_s=50),  # queue 0
        JobView(job_id=3, gpus=2, submit_time=1, attained_gpu_s=2000),  # queue 2
        JobView(job_id=4, gpus=8, submit_time=3, attained_gpu_s=0),  # queue 0, earlier
        JobView(job_id=5, gpus=1, submit_time=2, attained_gpu_s=999),  # queue 1, later than job 1
    ]
    d = rank(jobs, now=10, config=cfg)
    assert ids(d) == [4, 2, 1, 5, 3]
    assert [x.queue for x in d] == [0, 0, 1, 1, 2]
    assert [x.rank for x in d] == [0, 1, 2, 3, 4]
    assert "queue 1 (attained 400 GPU-s >= 100)" in d[2].reason


def test_queue_limits_stretch_with_the_jobs_width():
    cfg = PolicyConfig(
        policy="las", queue_thresholds_gpu_s=[3600.0], min_run_s=0, queue_gpu_exponent=0.5
    )
    # 4 GPUs: the limit is 3600 x 4 ** 0.5 = 7200 GPU-s, so 7000 is still queue 0
    wide = JobView(job_id=1, gpus=4, submit_time=5, attained_gpu_s=7000)
    narrow = JobView(job_id=2, gpus=1, submit_time=0, attained_gpu_s=3700)  # queue 1
    d = rank([wide, narrow], 10, cfg)
    assert ids(d) == [1, 2] and [x.queue for x in d] == [0, 1]
    assert "queue 0 (attained 7000 GPU-s < 7200, limits x 2 for 4 GPUs)" in d[0].reason
    assert "queue 1 (attained 3700 GPU-s >= 3600)" in d[1].reason
    # Tiresias' 2D rule (exponent 0): both past 3600 GPU-s, FIFO inside queue 1
    tiresias = replace(cfg, queue_gpu_exponent=0.0)
    d = rank([wide, narrow], 10, tiresias)
    assert ids(d) == [2, 1] and [x.queue for x in d] == [1, 1]
    # wall time (exponent 1): 7000 / 4 = 1750 s
    assert rank([wide], 10, replace(cfg, queue_gpu_exponent=1.0))[0].queue == 0
    # running at 4 GPUs, 200 GPU-s short of 7200: its key changes in 50 s
    running = replace(wide, running=True, last_run_s=100)
    assert key_change_after(running, 10, cfg, None) == pytest.approx(50.0)
    assert key_change_after(replace(running, gpus=1), 10, cfg, None) == float("inf")
    with pytest.raises(ConfigError, match="queue_gpu_exponent"):
        from_dict(PolicyConfig, {"queue_gpu_exponent": 1.5}, None)


def test_gittins_orders_inside_a_queue_by_index():
    # history: half the jobs finish at 100 GPU-s, half at 10000.
    history = [100.0] * 50 + [10000.0] * 50
    cfg = PolicyConfig(
        policy="gittins",
        queue_thresholds_gpu_s=[50000.0],
        min_run_s=0,
        gittins_grid_start_gpu_s=10.0,
        gittins_grid_per_decade=10,
    )
    table = GittinsTable.from_samples(history, 10.0, 10)
    a_young = JobView(job_id=1, gpus=1, submit_time=0, attained_gpu_s=5)  # index at grid 0
    b_near = JobView(job_id=2, gpus=1, submit_time=9, attained_gpu_s=90)  # close to 100
    c_past = JobView(job_id=3, gpus=1, submit_time=1, attained_gpu_s=200)  # now a long job
    d = rank([a_young, b_near, c_past], now=10, config=cfg, history=table)
    # hand: near 100 the chance to finish soon is highest; past 100 only 10000s remain.
    assert ids(d) == [2, 1, 3]
    assert table.index(90) > table.index(5) > table.index(200) > 0
    assert "gittins" in d[0].reason and "100 completed jobs" in d[0].reason
    # The same order whether the service passes raw history or the table.
    assert ids(rank([a_young, b_near, c_past], 10, cfg, history)) == [2, 1, 3]


def test_gittins_without_history_falls_back_to_las_and_says_so():
    cfg = PolicyConfig(policy="gittins", queue_thresholds_gpu_s=[100.0], min_run_s=0)
    jobs = [
        JobView(job_id=1, gpus=1, submit_time=0, attained_gpu_s=500),
        JobView(job_id=2, gpus=1, submit_time=4, attained_gpu_s=0),
    ]
    d = rank(jobs, 10, cfg, None)
    assert ids(d) == [2, 1]
    assert all("no history yet: 2D-LAS order" in x.reason for x in d)


def test_starvation_guard_promotes_to_queue_zero():
    cfg = PolicyConfig(
        policy="las", queue_thresholds_gpu_s=[100.0], starvation_factor=2.0, min_run_s=0
    )
    starving = JobView(
        job_id=1, gpus=1, submit_time=0, attained_gpu_s=4000, last_run_s=4000, waiting_since=5000
    )
    fresh = JobView(job_id=2, gpus=1, submit_time=12000, attained_gpu_s=0)
    # waited 7000 s < 2 x 4000: stays in queue 1 behind the fresh job
    d = rank([starving, fresh], 12000, cfg)
    assert ids(d) == [2, 1] and not d[1].promoted
    # waited 9000 s > 8000: promoted, and FIFO inside queue 0 puts it first
    d = rank([starving, fresh], 14000, cfg)
    assert ids(d) == [1, 2]
    assert d[0].promoted and d[0].queue == 0
    assert "promoted to queue 0: waited 9000 s >= 2 x last run 4000 s" in d[0].reason
    # factor 0 disables the guard
    off = replace(cfg, starvation_factor=0.0)
    assert ids(rank([starving, fresh], 1e9, off)) == [2, 1]


def test_min_run_protects_a_fresh_stint():
    cfg = PolicyConfig(policy="las", queue_thresholds_gpu_s=[100.0], min_run_s=300)
    running = JobView(
        job_id=1, gpus=1, submit_time=0, attained_gpu_s=5000, running=True, last_run_s=60
    )
    new = JobView(job_id=2, gpus=1, submit_time=50, attained_gpu_s=0)
    d = rank([running, new], 100, cfg)
    assert ids(d) == [1, 2] and d[0].reason.startswith("protected")
    older = replace(running, last_run_s=400)
    assert ids(rank([older, new], 100, cfg)) == [2, 1]


def test_baselines():
    jobs = [
        JobView(job_id=1, gpus=1, submit_time=0, true_duration_s=1000, executed_s=900),
        JobView(job_id=2, gpus=8, submit_time=100, true_duration_s=50),
        JobView(job_id=3, gpus=2, submit_time=50, true_duration_s=300),
    ]
    assert ids(rank(jobs, 200, PolicyConfig(policy="fifo", min_run_s=0))) == [1, 3, 2]
    # sjf: 2D size 1000, 400, 600 GPU-s
    assert ids(rank(jobs, 200, PolicyConfig(policy="sjf", min_run_s=0))) == [2, 3, 1]
    # srtf: remaining 100, 400, 600 GPU-s
    assert ids(rank(jobs, 200, PolicyConfig(policy="srtf", min_run_s=0))) == [1, 2, 3]
    # multifactor with size weight >> age: big jobs first (Slurm favours large jobs)
    mf = PolicyConfig(policy="multifactor", multifactor_size_weight=100, min_run_s=0)
    d = rank(jobs, 200, mf)
    assert ids(d) == [2, 3, 1]
    assert d[0].reason.startswith("priority 800 = age 0 + size 800")
    # age dominates after enough waiting with a large age weight
    old = PolicyConfig(policy="multifactor", multifactor_age_weight=1e6, min_run_s=0)
    assert ids(rank(jobs, 200, old)) == [1, 3, 2]


def test_oracles_refuse_missing_durations():
    with pytest.raises(ValueError, match="true_duration_s"):
        rank([JobView(job_id=1, gpus=1, submit_time=0)], 0, PolicyConfig(policy="sjf"))


@pytest.mark.parametrize("policy", ["gittins", "las", "fifo", "multifactor"])
def test_no_oracle_leak_permuting_hidden_durations(policy):
    rng = random.Random(7)
    cfg = PolicyConfig(policy=policy, queue_thresholds_gpu_s=[500.0, 5000.0])
    history = [rng.lognormvariate(7, 2) for _ in range(200)]
    jobs = [
        JobView(
            job_id=i,
            gpus=rng.choice([1, 1, 2, 4, 8]),
            submit_time=rng.uniform(0, 1000),
            attained_gpu_s=rng.choice([0.0, 100.0, 900.0, 7000.0]),
            running=rng.random() < 0.3,
            last_run_s=rng.choice([0.0, 50.0, 600.0]),
            true_duration_s=rng.lognormvariate(7, 2),
        )
        for i in range(60)
    ]
    base = rank(jobs, 2000, cfg, history)
    durations = [j.true_duration_s for j in jobs]
    for _ in range(5):
        rng.shuffle(durations)
        shuffled = [replace(j, true_duration_s=d) for j, d in zip(jobs, durations, strict=True)]
        assert rank(shuffled, 2000, cfg, history) == base
    hidden = [replace(j, true_duration_s=None) for j in jobs]
    assert rank(hidden, 2000, cfg, history) == base


def test_promoted_job_gets_a_fresh_queue_zero_quantum():
    cfg = PolicyConfig(policy="las", queue_thresholds_gpu_s=[100.0], min_run_s=0)
    base = JobView(job_id=1, gpus=2, submit_time=0, attained_gpu_s=5000, running=True)
    fresh = JobView(job_id=2, gpus=1, submit_time=10, attained_gpu_s=0)
    # without promotion it sits in queue 1 behind the fresh job
    assert ids(rank([base, fresh], 20, cfg)) == [2, 1]
    # promoted at 4950 GPU-s: 50 GPU-s since then, still queue 0, older -> first
    lifted = replace(base, promoted_at_gpu_s=4950)
    d = rank([lifted, fresh], 20, cfg)
    assert ids(d) == [1, 2] and (
        "attained 50 GPU-s since promotion < 200, limits x 2 for 2 GPUs" in d[0].reason
    )
    # the quantum is used up once service since promotion passes the first threshold
    assert ids(rank([replace(lifted, promoted_at_gpu_s=4750), fresh], 20, cfg)) == [2, 1]


def test_gittins_per_gpu_class_orders_differently_from_pooled():
    # tables worked by hand in test_policy_gittins (CLASS_HISTORY): fresh jobs have pooled
    # index 0.03 whatever their size, but 1/30 with one GPU and 0.05 with two
    history = [(1, 30.0), (2, 10.0), (1, 30.0), (2, 200.0)]
    pooled = PolicyConfig(
        policy="gittins",
        queue_thresholds_gpu_s=[1e6],
        min_run_s=0,
        gittins_grid_start_gpu_s=100.0,
        gittins_classes="pooled",
        gittins_class_min_samples=2,
    )
    a = JobView(job_id=1, gpus=1, submit_time=0, attained_gpu_s=0)
    b = JobView(job_id=2, gpus=2, submit_time=5, attained_gpu_s=0)
    d = rank([a, b], 10, pooled, history)
    assert ids(d) == [1, 2]  # tie on the index: submit order
    assert [x.index for x in d] == pytest.approx([0.03, 0.03])
    assert "(4 completed jobs)" in d[0].reason
    by_gpus = replace(pooled, gittins_classes="gpus")
    d = rank([a, b], 10, by_gpus, history)
    assert ids(d) == [2, 1]
    assert [x.index for x in d] == pytest.approx([0.05, 1 / 30])
    assert "from 2 GPUs class (2 completed jobs)" in d[0].reason
    # too few samples per class: both read the pooled table again
    d = rank([a, b], 10, replace(by_gpus, gittins_class_min_samples=3), history)
    assert ids(d) == [1, 2] and "(4 completed jobs)" in d[1].reason
    # plain GPU-seconds (no GPU counts) mean one pooled table
    d = rank([a, b], 10, by_gpus, [s for _, s in history])
    assert ids(d) == [1, 2]
    with pytest.raises(ConfigError, match="gittins_classes"):
        from_dict(PolicyConfig, {"gittins_classes": "users"}, None)


def test_wait_guard_lifts_a_job_after_factor_x_its_predicted_run():
    """A pending job that waited `wait_guard_factor` x its predicted run (1 / index
    GPU-seconds over its GPUs) goes ahead of every unguarded job; the key says when it
    changes."""
    table = GittinsTable.from_samples([3600.0 * k for k in range(1, 41)], whole=True)
    cfg = PolicyConfig(
        gittins_kinds=[], gittins_classes="pooled", gittins_index="whole", wait_guard_factor=2
    )
    index = table.step(0.0)[0]  # the index as ranking reads it
    unit = 2 / (index * 8)  # 2 x the predicted run of an 8-GPU job, seconds

    def key(now, c=cfg):
        return key_and_change(JobView(1, 8, 0.0, waiting_since=0.0), now, c, table)

    (_, _, score, _, _), after = key(0.0)
    assert score == -index and after == pytest.approx(unit)
    assert key(unit * 1.01)[0][2] == GUARDED
    assert (
        "wait guard"
        in rank([JobView(1, 8, 0.0, waiting_since=0.0)], unit * 1.01, cfg, table)[0].reason
    )
    assert key(unit * 1.01, PolicyConfig(**{**cfg.__dict__, "wait_guard_factor": 0}))[0][2] == (
        -index
    )
