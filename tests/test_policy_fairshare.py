"""Slurm alone with fair-share (policy "fairshare"): Slurm's formulas, the usage ledger,
the keys, the simulator's accrual, the composed gittins key and the flooding user."""

import math

import pytest

from slurm_ext.core.model import JobView
from slurm_ext.policy import (
    GittinsTable,
    PolicyConfig,
    UsageLedger,
    key_and_change,
    multifactor_priority,
    rank,
)
from slurm_ext.policy.fairshare import (
    age_factor,
    decay_per_second,
    fairshare_factor,
    index_site_factor,
)
from slurm_ext.sim.engine import SimConfig, Simulator
from slurm_ext.sim.traces import TraceJob
from slurm_ext.sim.users import FLOOD_USER, UserModel, synth_user_jobs, with_flooder

DAY = 86400.0


def test_slurm_formulas():
    d = decay_per_second(7 * DAY)  # 1 - 0.693 / half-life, per second (Slurm's constant)
    assert d == pytest.approx(1 - 0.693 / (7 * DAY))
    assert d ** (7 * DAY) == pytest.approx(0.5, rel=1e-3)
    assert decay_per_second(0) == 1.0  # PriorityDecayHalfLife=0: no decay
    assert age_factor(3.5 * DAY, 7 * DAY) == 0.5 and age_factor(30 * DAY, 7 * DAY) == 1.0
    assert fairshare_factor(0.0, 100.0, 0.25) == 1.0  # no usage
    assert fairshare_factor(25.0, 100.0, 0.25) == 0.5  # used exactly its share
    assert fairshare_factor(50.0, 100.0, 0.25) == 0.25
    # 1000 x 0.5 + 10000 x 0.25, truncated to an integer as Slurm's uint32
    assert multifactor_priority(3.5 * DAY + 1, 0.25, 1000, 10000, 7 * DAY) == 3000


def test_ledger_charges_decays_and_orders_users():
    led = UsageLedger({"a", "b"}, half_life_s=3600.0, calc_period_s=300.0)
    led.advance(0.0, [])  # the first pass starts the clock
    led.charge("a", 8, 0.0, 600.0)  # a job of a's ended at 600 s
    led.advance(900.0, [("b", 1, 600.0)])  # b's job runs since 600 s
    assert led.last == 900.0
    assert led.factor("a") < led.factor("b") < 1.0
    assert led.factor("nobody") == 1.0
    # a's usage was decayed over 900 s before b's 300 s were added
    a_raw = 8 * 600 * led.decay**600 * led.decay**900
    assert led.raw["a"] == pytest.approx(a_raw)
    assert led.raw["b"] == pytest.approx(300 * led.decay**300)
    led.advance(1000.0, [])  # not a new boundary: nothing moves
    assert led.last == 900.0
    with pytest.raises(ValueError, match="calc period"):
        UsageLedger(set(), 3600.0, 0.0)


def test_ledger_starts_its_clock_at_the_first_pass():
    """A trace at epoch times: the first pass must not decay usage over 50 years."""
    led = UsageLedger({"a", "b"}, half_life_s=3600.0, calc_period_s=300.0)
    t0 = 1.7e9
    led.charge("a", 1, t0, t0 + 60.0)  # ended before any pass ran
    led.advance(t0 + 300.0, [])
    assert led.raw["a"] == pytest.approx(60 * led.decay**60)
    assert led.factor("a") < 1.0 == led.factor("b")


def test_fairshare_key_light_user_first_then_age_and_next_pass():
    cfg = PolicyConfig(policy="fairshare", min_run_s=0)
    jobs = [
        JobView(job_id=1, gpus=1, submit_time=0, user="heavy"),
        JobView(job_id=2, gpus=1, submit_time=500, user="light"),
        JobView(job_id=3, gpus=1, submit_time=100, user="light"),
    ]
    fs = {"heavy": 0.1}  # light: no usage, factor 1
    d = rank(jobs, 600.0, cfg, fair_share=fs)
    assert [x.job_id for x in d] == [3, 2, 1]  # light user first, older first within it
    assert "multifactor priority 10000" in d[0].reason
    # without factors every user reads 1: submit order (age)
    assert [x.job_id for x in rank(jobs, 600.0, cfg)] == [1, 3, 2]
    job = JobView(job_id=2, gpus=1, submit_time=500.0, user="light")
    key, after = key_and_change(job, 610.0, cfg, None, fair_share=1.0)
    assert key[2] == -10000.0 and after == pytest.approx(290.0)  # the next 300 s pass


def test_composed_gittins_key_and_guard():
    cfg = PolicyConfig(fairshare_site_weight=10000.0, min_run_s=0, wait_guard_factor=0)
    job = JobView(job_id=1, gpus=1, submit_time=0.0)
    assert cfg.reads_fairshare and not PolicyConfig().reads_fairshare
    # no history: the index is 0, so the key is Slurm's priority alone
    assert key_and_change(job, 0.0, cfg, None, fair_share=0.5)[0][2] == -5000.0
    assert index_site_factor(1 / 60) == 1.0 and index_site_factor(1e-12) == 0.0
    assert index_site_factor(1 / 6000) == pytest.approx(1 - 2 / 6)


def test_simulated_usage_is_the_gpu_time_run():
    """Without decay, the ledger holds exactly each user's GPU-seconds once every job
    ended: the end charges and the passes' charges neither overlap nor miss time."""
    trace = synth_user_jobs(120, 16, 1.2, seed=3, model=UserModel(users=5))
    cfg = PolicyConfig(policy="fairshare", fairshare_half_life_s=0)
    sim = Simulator(trace, cfg, SimConfig(nodes=2, gpus_per_node=8, preemptive=False))
    jobs = sim.run()
    assert sim.keys.ledger is not None
    for user in {j.user for j in jobs}:
        ran = sum(j.gpus * (j.finish - j.start) for j in jobs if j.user == user)
        assert sim.keys.ledger.raw[user] == pytest.approx(ran, rel=1e-9)


def test_fairshare_lets_a_light_user_past_a_heavy_users_backlog():
    heavy = [TraceJob(i, 8, float(i), 3600.0, user="heavy") for i in range(12)]
    light = TraceJob(12, 8, 4000.0, 600.0, user="light")
    trace = heavy + [light]
    cl = SimConfig(nodes=2, gpus_per_node=8, preemptive=False)

    def wait(policy: str) -> float:
        jobs = Simulator(trace, PolicyConfig(policy=policy), cl).run()
        return jobs[-1].first_start - light.submit_time

    # FIFO: behind the 10 heavy jobs still queued; fair-share: the next free node
    assert wait("fifo") >= 4 * 3600
    assert wait("fairshare") <= 3600
    # the ranking composed as a site would (a bounded SiteFactor, the guard inside it)
    composed = PolicyConfig(fairshare_site_weight=1000.0)
    jobs = Simulator(trace, composed, cl).run()
    assert jobs[-1].first_start - light.submit_time <= 3600


def test_flooder_is_added_in_bursts_mid_trace():
    jobs = synth_user_jobs(200, 16, 1.0, seed=1)
    out = with_flooder(jobs, 50, bursts=5, seed=2)
    flood = [j for j in out if j.user == FLOOD_USER]
    assert len(out) == 250 and len(flood) == 50
    assert [j.job_id for j in out] == list(range(250))
    assert [j.submit_time for j in out] == sorted(j.submit_time for j in out)
    t0, t1 = jobs[0].submit_time, jobs[-1].submit_time
    assert len({j.submit_time for j in flood}) == 5
    assert all(t0 + (t1 - t0) / 4 <= j.submit_time <= t0 + 3 * (t1 - t0) / 4 for j in flood)
    assert all(j.gpus == 1 and j.duration_s <= 3600 for j in flood)
    assert with_flooder(jobs, 0) == jobs


def test_config_rejects_bad_fairshare_settings():
    with pytest.raises(ValueError, match="fairshare"):
        PolicyConfig(fairshare_site_weight=-1)
    assert math.isclose(PolicyConfig().fairshare_half_life_s, 7 * DAY)


def test_site_guard_gives_the_top_site_factor_which_fair_share_can_outweigh():
    """A guarded job's SiteFactor share is 1 (not a jump over every job), so a light
    user's fresh job still passes a heavy user's guarded one."""
    cfg = PolicyConfig(fairshare_site_weight=1000.0, min_run_s=0, wait_guard_factor=1.0)
    table = GittinsTable.from_samples([100.0] * 50, 60.0, 4)
    now = 1e4  # the heavy user's job waited 10^4 s >> 1 x its ~100 s predicted run
    heavy = JobView(job_id=1, gpus=1, submit_time=0.0, user="heavy")
    light = JobView(job_id=2, gpus=1, submit_time=now - 1, user="light")
    fs = {"heavy": 0.5}  # 5000 points of fair-share below the light user
    key = key_and_change(heavy, now, cfg, table, fair_share=0.5)[0]
    age = multifactor_priority(now, 0.5, 1000, 10000, 7 * DAY)
    assert key[2] == -(age + 1000.0)  # Slurm's priority + the whole site weight
    order = rank([heavy, light], now, cfg, history=table, fair_share=fs)
    assert [d.job_id for d in order] == [2, 1]
    assert "composed with Slurm's priority" in order[0].reason
    # between jobs of one user the site term still orders: the guarded one first
    fresh = JobView(job_id=3, gpus=1, submit_time=now - 1, user="heavy")
    order = rank([fresh, heavy], now, cfg, history=table, fair_share=fs)
    assert [d.job_id for d in order] == [1, 3]
