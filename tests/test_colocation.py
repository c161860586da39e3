"""Co-location decisions and the EaCO admission test on hand-computed cases."""

from __future__ import annotations

import pytest

from slurm_ext.core.model import JobClasses
from slurm_ext.policy import Prediction, classify
from slurm_ext.policy.colocation import (
    GUARANTEED as G,
)
from slurm_ext.policy.colocation import (
    OPPORTUNISTIC as O,
)
from slurm_ext.policy.colocation import (
    CoState,
    EacoModel,
    GpuView,
    JobOnGpu,
    Policy,
    decide,
    eaco_admit,
    forget,
)


def test_classify_qos_then_partition_then_default():
    rules = JobClasses(
        guaranteed_qos=("high",),
        opportunistic_qos=("scavenger",),
        guaranteed_partitions=("gpu",),
        opportunistic_partitions=("spot",),
        default_class=G,
    )
    assert classify("scavenger", "gpu", rules) == O  # QOS decides first
    assert classify("high", "spot", rules) == G
    assert classify("normal", "spot", rules) == O
    assert classify("normal", "gpu,spot", rules) == O
    assert classify("normal", "gpu", rules) == G
    assert classify(None, None, JobClasses(default_class=O)) == O


def view(*jobs, mem=0.5, power=300.0, gpu="g0"):
    return GpuView(gpu, tuple(JobOnGpu(j, k, u) for j, k, u in jobs), mem, power)


def test_learns_solo_level_then_pauses_when_slowed_and_resumes_when_idle():
    st, pol = CoState(), Policy(slow_fraction=0.7, solo_alpha=0.5)
    assert decide([view((1, G, 0.8))], st, pol) == []
    assert decide([view((1, G, 0.6))], st, pol) == []
    assert st.solo_util[1] == pytest.approx(0.7)  # 0.8 then EMA 0.5*0.8+0.5*0.6
    # opportunistic job 2 arrives; 1 at 0.5 >= 0.7*0.7=0.49: not slowed
    assert decide([view((1, G, 0.5), (2, O, 0.3))], st, pol) == []
    acts = decide([view((1, G, 0.45), (2, O, 0.4))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "slowdown")]
    assert st.paused == {2}
    assert st.solo_util[1] == pytest.approx(0.7)  # not learnt while co-located
    # 1 busy again at its solo level: 2 stays paused, 1 relearns its solo level
    assert decide([view((1, G, 0.7), (2, O, 0.0))], st, pol) == []
    # 1 idles: 2 resumes
    acts = decide([view((1, G, 0.01), (2, O, 0.0))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("resume", 2, "idle")]
    assert st.paused == set()
    # idle guaranteed with opportunistic running is not "slowed": no flapping
    assert decide([view((1, G, 0.02), (2, O, 0.9))], st, pol) == []


def test_memory_pressure_pauses_only_with_busy_guaranteed():
    st, pol = CoState(), Policy(memory_high=0.95)
    acts = decide([view((1, G, 0.5), (2, O, 0.5), (3, O, 0.1), mem=0.96)], st, pol)
    assert sorted((a.kind, a.job_id, a.code) for a in acts) == [
        ("pause", 2, "memory"),
        ("pause", 3, "memory"),
    ]
    st2 = CoState()
    assert decide([view((1, G, 0.0), (2, O, 0.5), mem=0.99)], st2, pol) == []


def test_unknown_util_counts_as_busy_and_no_solo_means_no_slowdown_verdict():
    st, pol = CoState(), Policy()
    assert decide([view((1, G, None), (2, O, 0.5))], st, pol) == []
    st.paused.add(2)
    assert decide([view((1, G, None), (2, O, 0.0))], st, pol) == []  # stays paused
    assert st.paused == {2}


def test_job_on_two_gpus_resumes_only_when_both_allow():
    st, pol = CoState(paused={5}), Policy()
    g0 = view((1, G, 0.0), (5, O, 0.0), gpu="g0")
    g1 = view((3, G, 0.6), (5, O, 0.0), gpu="g1")
    assert decide([g0, g1], st, pol) == []
    acts = decide([g0, view((3, G, 0.01), (5, O, 0.0), gpu="g1")], st, pol)
    assert [(a.kind, a.job_id) for a in acts] == [("resume", 5)]


def test_paused_job_that_left_is_resumed_and_forgotten():
    st = CoState(paused={7}, solo_util={1: 0.5, 9: 0.4})
    acts = decide([view((1, G, 0.6))], st, Policy())
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("resume", 7, "gone")]
    forget(st, {1})
    assert st.solo_util == {1: pytest.approx(0.53)}


def test_eaco_admit_hand_computed():
    m = EacoModel(
        gpu_idle_w=100,
        gpu_max_w=700,
        opportunistic_power_w=250,
        predicted_slowdown=0.05,
        max_slowdown=0.1,
    )
    # separate: 300*3600 + 250*3600 = 1,980,000 J
    # together: (300+250-100)=450 W for 3600*1.05 s = 1,701,000 J -> saving 0.1409
    ok, saving, _ = eaco_admit(300, 3600, 3600, m)
    assert ok and saving == pytest.approx(279_000 / 1_980_000)
    # unequal lengths: 300 W x 7200 s + 250 W x 3600 s = 3,060,000 J separate;
    # together 450 W x 3780 s + 300 W x 3600 s = 2,781,000 J -> saving 0.0912 > 0.05
    ok, saving, _ = eaco_admit(300, 7200, 3600, m)
    assert ok and saving == pytest.approx(279_000 / 3_060_000)
    # near-peak guaranteed job: combined power capped at 700 W; 700x3780=2,646,000 vs
    # 650x3600+250x3600=3,240,000 -> saving 0.183, admitted
    assert eaco_admit(650, 3600, 3600, m)[0]
    # slowdown beyond the bound is refused whatever the saving
    ok, _, why = eaco_admit(300, 3600, 3600, EacoModel(100, 700, 250, 0.2, 0.1))
    assert not ok and "above bound" in why
    # small saving: idle 20 W -> 530 W together x 3780 = 2,003,400 > 1,980,000: no saving
    ok, saving, why = eaco_admit(300, 3600, 3600, EacoModel(20, 700, 250, 0.05, 0.1))
    assert not ok and saving < 0 and "does not outweigh" in why


def test_eaco_mode_keeps_refused_newcomer_paused_while_guaranteed_busy():
    refuse = EacoModel(gpu_idle_w=20, predicted_slowdown=0.05, max_slowdown=0.1)
    st, pol = CoState(), Policy(eaco=refuse)
    decide([view((1, G, 0.6), power=300.0)], st, pol)  # learns solo power 300 W
    acts = decide([view((1, G, 0.6), (2, O, 0.2))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "eaco")]
    acts = decide([view((1, G, 0.0), (2, O, 0.0))], st, pol)
    assert [(a.kind, a.job_id) for a in acts] == [("resume", 2)]
    admit = Policy(eaco=EacoModel(gpu_idle_w=100))
    st2 = CoState()
    decide([view((1, G, 0.6), power=300.0)], st2, admit)
    assert decide([view((1, G, 0.6), (2, O, 0.2))], st2, admit) == []
    assert st2.admitted == {2}


def rview(*jobs, mem=0.5, gpu="g0"):
    """Jobs as (id, class, util, progress rate)."""
    return GpuView(gpu, tuple(JobOnGpu(j, k, u, r) for j, k, u, r in jobs), mem, 300.0)


def test_progress_slowdown_pauses_while_utilisation_looks_fine():
    st, pol = CoState(), Policy(slow_fraction=0.7, solo_alpha=0.5, min_solo_rate_samples=3)
    for rate in (100.0, 100.0, 80.0):  # solo: EMA 100, 100, 0.5*100+0.5*80 = 90
        assert decide([rview((1, G, 0.8, rate))], st, pol) == []
    assert st.solo_rate[1] == pytest.approx(90.0) and st.solo_rate_n[1] == 3
    assert st.solo_util[1] == pytest.approx(0.8)
    # opportunistic job 2 arrives; utilisation stays at its solo 0.8 throughout
    assert decide([rview((1, G, 0.8, 64.0), (2, O, 0.3, None))], st, pol) == []  # 64 >= 63
    assert st.solo_rate[1] == pytest.approx(90.0)  # not learnt while co-located
    acts = decide([rview((1, G, 0.8, 62.0), (2, O, 0.3, None))], st, pol)  # 62 < 0.7 x 90
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "progress")]
    assert "progress at 62/s" in acts[0].reason and "solo 90/s" in acts[0].reason
    # paused: 1 is alone again and relearns its rate; 2 stays paused while 1 is busy
    assert decide([rview((1, G, 0.8, 100.0), (2, O, 0.0, None))], st, pol) == []
    assert st.solo_rate[1] == pytest.approx(95.0) and st.solo_rate_n[1] == 4
    # 1 idles: 2 resumes
    acts = decide([rview((1, G, 0.0, 0.0), (2, O, 0.0, None))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("resume", 2, "idle")]


def test_utilisation_slowdown_still_wins_and_either_signal_suffices():
    st, pol = CoState(), Policy(slow_fraction=0.7, min_solo_rate_samples=1)
    decide([rview((1, G, 0.8, 100.0))], st, pol)
    acts = decide([rview((1, G, 0.4, 100.0), (2, O, 0.3, None))], st, pol)  # util 0.4 < 0.56
    assert [(a.job_id, a.code) for a in acts] == [(2, "slowdown")]


def test_no_solo_rate_yet_means_no_progress_verdict():
    pol = Policy(slow_fraction=0.7, min_solo_rate_samples=3)
    st = CoState()
    for _ in range(2):  # two solo samples: one short of the three needed
        decide([rview((1, G, 0.8, 100.0))], st, pol)
    assert decide([rview((1, G, 0.8, 5.0), (2, O, 0.3, None))], st, pol) == []
    # co-located from the start: no solo level to judge job 1 by, so job 2 is paused as
    # unjudged - not by a progress verdict (no solo rate was learnt)
    st2 = CoState()
    acts = decide([rview((1, G, 0.8, 1.0), (2, O, 0.3, None))], st2, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "unjudged")]
    assert 1 not in st2.solo_rate
    # a job that made no progress alone (solo rate 0) is never judged by rate
    st3 = CoState()
    for _ in range(3):
        decide([rview((1, G, 0.8, 0.0))], st3, pol)
    assert decide([rview((1, G, 0.8, 0.0), (2, O, 0.3, None))], st3, pol) == []
    # an idle guaranteed job is not "slowed" by its rate either (no flapping)
    for _ in range(3):
        decide([rview((1, G, 0.8, 100.0))], st, pol)
    assert decide([rview((1, G, 0.01, 1.0), (2, O, 0.3, None))], st, pol) == []


def test_solo_rate_learnt_once_per_pass_and_not_beside_an_opportunistic_job_elsewhere():
    st, pol = CoState(), Policy(solo_alpha=0.5)
    # job 1 on two GPUs, nothing else: one EMA step per pass, not one per GPU
    decide([rview((1, G, 0.8, 100.0), gpu="g0"), rview((1, G, 0.8, 100.0), gpu="g1")], st, pol)
    decide([rview((1, G, 0.8, 50.0), gpu="g0"), rview((1, G, 0.8, 50.0), gpu="g1")], st, pol)
    assert st.solo_rate[1] == pytest.approx(75.0) and st.solo_rate_n[1] == 2
    # an active opportunistic job on g1 only: the job's rate is not solo any more
    decide(
        [rview((1, G, 0.8, 10.0), gpu="g0"), rview((1, G, 0.8, 10.0), (2, O, 0.2, None), gpu="g1")],
        st,
        pol,
    )
    assert st.solo_rate[1] == pytest.approx(75.0) and st.solo_rate_n[1] == 2
    forget(st, set())
    assert st.solo_rate == {} and st.solo_rate_n == {}


def test_eaco_withdraws_an_admission_the_measured_slowdown_exceeds():
    """Admitted on a predicted 5 % slowdown; job 1 then runs at 0.57 of solo 0.60 (5 %:
    kept), then at 0.50 (16.7 % > the 10 % bound: paused, though 0.50 is well above the
    slow_fraction rule's 0.7 x 0.60 = 0.42)."""
    st, pol = CoState(), Policy(slow_fraction=0.7, eaco=EacoModel(gpu_idle_w=100))
    decide([view((1, G, 0.6), power=300.0)], st, pol)
    assert decide([view((1, G, 0.6), (2, O, 0.2))], st, pol) == [] and st.admitted == {2}
    assert decide([view((1, G, 0.57), (2, O, 0.2))], st, pol) == []
    acts = decide([view((1, G, 0.5), (2, O, 0.3))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "eaco")]
    assert "measured slowdown 0.167 above bound 0.100" in acts[0].reason
    assert st.admitted == set() and st.paused == {2}
    # refused from now on: it stays paused while job 1 is busy, resumes when it idles
    assert decide([view((1, G, 0.6), (2, O, 0.0))], st, pol) == []
    acts = decide([view((1, G, 0.0), (2, O, 0.0))], st, pol)
    assert [(a.kind, a.job_id) for a in acts] == [("resume", 2)]


def test_eaco_admit_takes_learnt_inputs_over_configured():
    """Configured 5 % slowdown and 250 W admit (saving 0.141, hand-computed above); a
    learnt 12 % slowdown is above the 10 % bound; a learnt newcomer at 600 W: together
    min(700, 300 + 600 - 100) = 700 W x 3780 s = 2,646,000 J vs 300x3600 + 600x3600 =
    3,240,000 J separate: saving 0.183, admitted."""
    m = EacoModel(100, 700, 250, 0.05, 0.1)
    assert eaco_admit(300, 3600, 3600, m)[0]
    ok, _, why = eaco_admit(300, 3600, 3600, m, slowdown=0.12)
    assert not ok and "slowdown 0.120 above bound" in why
    ok, saving, _ = eaco_admit(300, 3600, 3600, m, opportunistic_power_w=600)
    assert ok and saving == pytest.approx(594_000 / 3_240_000)


def test_decide_uses_learnt_predictions_and_says_which():
    """Same GPU, same configured model (admits at 5 %): a learnt 12 % slowdown of the
    guaranteed job's kind refuses the newcomer, and the reason and verdict_source say the
    inputs were learnt; a job without history is judged on the configured values."""
    pol = Policy(eaco=EacoModel(gpu_idle_w=100))
    st = CoState()
    st.predictions[1] = Prediction(slowdown=0.12, source="name=train-bert, 4 shared runs")
    decide([view((1, G, 0.6), power=300.0)], st, pol)
    acts = decide([view((1, G, 0.6), (2, O, 0.2))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "eaco")]
    assert "slowdown 0.120 above bound" in acts[0].reason
    assert "learnt: slowdown 0.120 of job 1's name=train-bert" in acts[0].reason
    assert st.verdict_source == {2: "learnt"}
    st2 = CoState()
    decide([view((1, G, 0.6), power=300.0)], st2, pol)
    assert decide([view((1, G, 0.6), (2, O, 0.2))], st2, pol) == []
    assert st2.admitted == {2} and st2.verdict_source == {2: "configured"}
    forget(st, set())
    assert st.predictions == {} and st.verdict_source == {}


def test_guaranteed_job_starting_beside_a_running_opportunistic_one_is_protected():
    """Job 2 ran alone; job 1 (guaranteed) lands on its GPU. With no solo level for job 1
    it cannot be judged, so job 2 is paused; job 1's solo level is learnt while job 2
    waits, and job 2 resumes when job 1 is gone. An idle newcomer pauses nothing."""
    st, pol = CoState(), Policy()
    assert decide([view((2, O, 0.4))], st, pol) == []
    acts = decide([view((1, G, 0.45), (2, O, 0.4))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "unjudged")]
    assert "job 1 has no solo level yet" in acts[0].reason
    assert decide([view((1, G, 0.6), (2, O, 0.0))], st, pol) == []
    assert st.solo_util == {1: pytest.approx(0.6)} and st.paused == {2}
    acts = decide([view((2, O, 0.0))], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("resume", 2, "idle")]
    st2 = CoState()
    assert decide([view((1, G, 0.0), (2, O, 0.4))], st2, pol) == []


def test_multi_gpu_job_learns_no_solo_level_while_shared_on_another_gpu():
    """Job 1 spans g0 and g1; job 2 shares g1 and slows job 1 everywhere (a synchronous
    job runs at its slowest GPU's pace). g0 alone must not teach a low solo level."""
    st, pol = CoState(), Policy()
    decide([view((1, G, 0.9), gpu="g0"), view((1, G, 0.9), gpu="g1")], st, pol)
    assert st.solo_util[1] == pytest.approx(0.9)
    acts = decide([view((1, G, 0.5), gpu="g0"), view((1, G, 0.5), (2, O, 0.3), gpu="g1")], st, pol)
    assert [(a.kind, a.job_id, a.code) for a in acts] == [("pause", 2, "slowdown")]
    assert st.solo_util[1] == pytest.approx(0.9)  # not pulled towards 0.5
