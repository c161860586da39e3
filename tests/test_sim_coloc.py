"""Sharing in simulated time against Slurm alone, on hand-computed one-GPU cases.

The decisions are the node agent's own `decide()`; profiles are given so the speeds,
pauses and energy can be worked out by hand from sim/sharing.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_ext.cli.sim import simulate
from slurm_ext.policy import PolicyConfig
from slurm_ext.policy import colocation as co
from slurm_ext.sim.coloc import ShareConfig, SharingSimulator
from slurm_ext.sim.coloc_run import mark_opportunistic, run_pair
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.run import with_limits
from slurm_ext.sim.sharing import JobProfile, speeds
from slurm_ext.sim.synth import synth_jobs
from slurm_ext.sim.traces import TraceJob

ONE_GPU = SimConfig(nodes=1, gpus_per_node=1, preemptive=False)
FIFO = PolicyConfig(policy="fifo")


def pair(opp_at: float = 0.0) -> list[TraceJob]:
    return [
        TraceJob(1, 1, 0.0, 1000.0, model_tag="a", user="u"),
        TraceJob(2, 1, opp_at, 1000.0, model_tag="b", user="u", opportunistic=True),
    ]


def test_light_pair_shares_and_saves_energy():
    """Both at 0.4 utilisation: demand 0.8 fits, each runs at 1 - 0.05 x 0.4 = 0.98 and
    both finish at 1000 / 0.98 s. Alone they run one after the other (0-1000, 1000-2000).
    Energy alone: 70 W x 2000 s + 620 W x 0.4 x 2000 s = 636,000 J; shared: (70 + 620 x
    0.784) W x 1020.4 s = 567,429 J."""
    prof = {1: JobProfile(0.4, 0.3), 2: JobProfile(0.4, 0.3)}
    out = run_pair(pair(), FIFO, ONE_GPU, ShareConfig(), prof)
    alone, shared = out["slurm_alone"], out["shared"]
    assert alone["guaranteed_avg_jct_s"] == pytest.approx(1000.0)
    assert alone["opportunistic_avg_jct_s"] == pytest.approx(2000.0)
    assert shared["guaranteed_avg_jct_s"] == pytest.approx(1000 / 0.98)
    assert shared["opportunistic_avg_jct_s"] == pytest.approx(1000 / 0.98)
    assert shared["guaranteed_stretch_max"] == pytest.approx(1 / 0.98)
    assert alone["energy_kwh"] * 3.6e6 == pytest.approx(636_000)
    assert shared["energy_kwh"] * 3.6e6 == pytest.approx((70 + 620 * 0.784) * 1000 / 0.98)
    assert shared["gpu_utilization"] == pytest.approx(0.784)
    # held GPUs only: alone the GPU is held all 2000 s (same as above); shared it is held
    # until 1020.4 s, then idle (off): same as the shared total
    work_h = 2000 / 3600
    assert alone["held_kwh_per_gpu_hour_of_work"] * 3.6e6 * work_h == pytest.approx(636_000)
    assert shared["held_kwh_per_gpu_hour_of_work"] == pytest.approx(
        shared["kwh_per_gpu_hour_of_work"]
    )
    assert alone["gpu_utilization"] == pytest.approx(0.4)
    # over the GPU-seconds holding a job: the same here (the GPU is held until each ends)
    assert alone["held_gpu_utilization"] == pytest.approx(0.4)
    assert shared["held_gpu_utilization"] == pytest.approx(0.784)
    assert alone["gpus_held_fraction"] == shared["gpus_held_fraction"] == pytest.approx(1.0)
    assert shared["pauses_per_opportunistic_job"] == 0


def test_compute_bound_pair_is_paused_by_the_agent():
    """Two 0.99 loops: each would run at 0.48 (the H100 reading); the guaranteed job's
    utilisation 0.475 < 0.7 x 0.99, so decide() pauses the opportunistic one at once; it
    resumes when the guaranteed job ends at 1000 s and finishes at 2000 s."""
    prof = {1: JobProfile(0.99, 0.1), 2: JobProfile(0.99, 0.1)}
    sim = SharingSimulator(pair(), FIFO, ONE_GPU, ShareConfig(), prof)
    sim.run()
    g, o = sim.jobs[0], sim.opp_jobs[0]
    assert g.finish == pytest.approx(1000.0) and o.finish == pytest.approx(2000.0)
    assert sim.agents.pauses == {2: 1} and sim.agents.resumes == 1


def test_memory_must_fit_and_guaranteed_job_is_protected_when_it_comes_second():
    """0.6 + 0.5 of the memory does not fit under 0.9: the opportunistic job waits for the
    GPU to be free. Then an opportunistic job running first: the guaranteed job arriving
    at 100 s has no solo level, so the agent pauses its neighbour (unjudged)."""
    prof = {1: JobProfile(0.5, 0.6), 2: JobProfile(0.5, 0.5)}
    sim = SharingSimulator(pair(), FIFO, ONE_GPU, ShareConfig(), prof)
    sim.run()
    assert sim.opp_jobs[0].first_start == pytest.approx(1000.0)
    trace = [
        TraceJob(1, 1, 100.0, 1000.0, model_tag="a"),
        TraceJob(2, 1, 0.0, 1000.0, model_tag="b", opportunistic=True),
    ]
    prof = {1: JobProfile(0.9, 0.3), 2: JobProfile(0.9, 0.3)}
    # queued for whole GPUs too, job 2 gets the free GPU at 0 and job 1 waits for it
    sim = SharingSimulator(trace, FIFO, ONE_GPU, ShareConfig(), prof)
    sim.run()
    assert sim.unjudged == 0 and sim.jobs[0].first_start == pytest.approx(1000.0)
    # shards only: job 2 runs on a shard of the idle GPU and job 1 lands beside it
    sim = SharingSimulator(trace, FIFO, ONE_GPU, ShareConfig(whole_gpus=False), prof)
    sim.run()
    assert sim.unjudged == 1 and sim.agents.pauses == {2: 1}
    assert sim.jobs[0].finish == pytest.approx(1100.0)  # never slowed
    assert sim.opp_jobs[0].finish == pytest.approx(2000.0)  # 100 s done, 900 s after 1100


def test_eaco_learns_from_the_simulated_agents_history():
    """Kind "a" (guaranteed, 0.9) runs four times beside kind "b" (0.5): each time the
    agent's measured slowdown exceeds 10 % and the admission is withdrawn. With min_runs 1
    the history of the first run feeds the next verdicts: they say "learnt" and refuse."""
    trace, prof = [], {}
    for i in range(4):
        t0 = i * 5000.0
        trace += [
            TraceJob(10 * i + 1, 1, t0, 1000.0, model_tag="a", user="u"),
            TraceJob(10 * i + 2, 1, t0, 1000.0, model_tag="b", user="v", opportunistic=True),
        ]
        prof |= {10 * i + 1: JobProfile(0.9, 0.2), 10 * i + 2: JobProfile(0.5, 0.2)}
    share = ShareConfig(agent=co.Policy(eaco=co.EacoModel(gpu_idle_w=100)), min_runs=1)
    sim = SharingSimulator(trace, FIFO, ONE_GPU, share, prof)
    sim.run()
    assert sim.coloc_history.predict({"model": "a"}, 1).slowdown > 0.10
    assert sim.coloc_history.predict({"model": "b"}, 1).power_w > 70
    assert all(j.finish is not None for j in sim.opp_jobs)
    assert sim.agents.refusals >= 3
    # the first verdict had no history; the later ones took the learnt inputs
    assert sim.agents.verdicts["configured"] == 1 and sim.agents.verdicts["learnt"] == 3


def test_mark_opportunistic_is_seeded_and_keeps_trace_flags():
    jobs = [TraceJob(i, 1, float(i), 60.0, opportunistic=(i == 0)) for i in range(1000)]
    a = mark_opportunistic(jobs, 0.3, seed=4)
    assert a == mark_opportunistic(jobs, 0.3, seed=4)
    assert a[0].opportunistic and 0.25 < sum(j.opportunistic for j in a) / 1000 < 0.35
    with pytest.raises(ValueError, match="fraction"):
        mark_opportunistic(jobs, 1.5, seed=0)


def test_simulate_share_cli(tmp_path):
    path = tmp_path / "t.csv"
    rows = ["job_id,num_gpu,submit_time,iterations,model_name,duration,interval"]
    rows += [f"{i},1,{i * 10},0,m{i % 3},{600 + i},0" for i in range(40)]
    path.write_text("\n".join(rows) + "\n")
    args = ["--trace", str(path), "--nodes", "1", "--gpus-per-node", "4", "--share"]
    r = CliRunner().invoke(simulate, [*args, "--opportunistic-fraction", "0.3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["shared"]["opportunistic_jobs"] + out["shared"]["guaranteed_jobs"] == 40
    assert set(out) == {"slurm_alone", "shared", "shared_vs_alone"}
    r = CliRunner().invoke(simulate, args)
    assert r.exit_code != 0 and "no opportunistic jobs" in r.output


def test_wide_opportunistic_jobs_wait_for_whole_gpus_by_default():
    """A 2-GPU opportunistic job beside a 2-GPU guaranteed job on a 2-GPU node: by
    default (max_shard_gpus 1) it waits for the whole GPUs (starts at 1000 s); with no
    limit it starts on the shards at 0 (light pair: 0.3 + 0.3 fits)."""
    two = SimConfig(nodes=1, gpus_per_node=2, preemptive=False)
    trace = [
        TraceJob(1, 2, 0.0, 1000.0, model_tag="a"),
        TraceJob(2, 2, 0.0, 1000.0, model_tag="b", opportunistic=True),
    ]
    prof = {1: JobProfile(0.3, 0.2), 2: JobProfile(0.3, 0.2)}
    sim = SharingSimulator(trace, FIFO, two, ShareConfig(), prof)
    sim.run()
    assert sim.opp_jobs[0].first_start == pytest.approx(1000.0) and sim.shard_starts == 0
    sim = SharingSimulator(trace, FIFO, two, ShareConfig(max_shard_gpus=0), prof)
    sim.run()
    assert sim.opp_jobs[0].first_start == 0.0 and sim.shard_starts == 1
    assert sim.opp_jobs[0].finish == pytest.approx(1000 / (1 - 0.05 * 0.3))


def test_time_limit_kills_a_guaranteed_job_that_sharing_slowed():
    """Slurm ends a stint at its time limit however it ran. The light pair of the first
    test under the Slurm scheduler, the guaranteed job limited to 1010 s: alone it ends at
    1000 s; shared it runs at 0.98 (1020.4 s needed) and is killed at 1010 s. The
    opportunistic job then runs alone: 1010 s at 0.98 leaves 10.2 s, done at 1020.2 s."""
    prof = {1: JobProfile(0.4, 0.3), 2: JobProfile(0.4, 0.3)}
    trace = [
        TraceJob(1, 1, 0.0, 1000.0, model_tag="a", time_limit_s=1010.0),
        TraceJob(2, 1, 0.0, 1000.0, model_tag="b", opportunistic=True, time_limit_s=7200.0),
    ]
    out = run_pair(trace, FIFO, ONE_GPU, ShareConfig(), prof)
    assert out["slurm_alone"]["timeouts"] == 0 and out["shared"]["timeouts"] == 1
    assert out["shared"]["guaranteed_avg_jct_s"] == pytest.approx(1010.0)
    assert out["shared"]["opportunistic_avg_jct_s"] == pytest.approx(1010 + 1000 - 1010 * 0.98)
    sim = SharingSimulator(trace, FIFO, ONE_GPU, ShareConfig(), prof)
    sim.run()
    assert sim.jobs[0].timed_out and not sim.opp_jobs[0].timed_out
    # a paused job is killed at its limit too: shards only, compute-bound pair, the
    # opportunistic job first (limit 500 s) is paused when the guaranteed one lands
    prof = {1: JobProfile(0.99, 0.1), 2: JobProfile(0.99, 0.1)}
    trace = [
        TraceJob(1, 1, 100.0, 1000.0, model_tag="a", time_limit_s=7200.0),
        TraceJob(2, 1, 0.0, 1000.0, model_tag="b", opportunistic=True, time_limit_s=500.0),
    ]
    sim = SharingSimulator(trace, FIFO, ONE_GPU, ShareConfig(whole_gpus=False), prof)
    sim.run()
    assert sim.agents.pauses == {2: 1} and sim.opp_jobs[0].finish == pytest.approx(500.0)
    assert sim.opp_jobs[0].timed_out and sim.jobs[0].finish == pytest.approx(1100.0)


def test_sharing_under_slurm_backfill():
    """Slurm's backfill pass starts jobs in the shared run as in Slurm alone, and the
    agents see them at once. One node of 2 GPUs: job 1 (1 GPU, limit 1000 s) runs from 0;
    job 2 (2 GPUs) waits for it, reserved at 1000 s; job 3 (1 GPU, 500 s, limit 600 s)
    fits before the reservation and is backfilled at the first tick, 30 s. Opportunistic
    job 4 (compute-bound, shards only) does not fit job 1's memory and took a shard of the
    idle GPU at 5 s; job 3 lands
    beside it with no solo level, so the agent pauses job 4 at 30 s: job 3 is never slowed
    (ends at 530 s), job 4 resumes then."""
    prof = {
        1: JobProfile(0.3, 0.8),
        2: JobProfile(0.3, 0.2),
        3: JobProfile(0.99, 0.2),
        4: JobProfile(0.99, 0.2),
    }
    trace = [
        TraceJob(1, 1, 0.0, 1000.0, model_tag="a", time_limit_s=1000.0),
        TraceJob(2, 2, 1.0, 100.0, model_tag="b", time_limit_s=200.0),
        TraceJob(3, 1, 2.0, 500.0, model_tag="c", time_limit_s=600.0),
        TraceJob(4, 1, 5.0, 100.0, model_tag="d", opportunistic=True, time_limit_s=3600.0),
    ]
    two = SimConfig(nodes=1, gpus_per_node=2, preemptive=False)
    assert two.scheduler == "slurm"
    share = ShareConfig(whole_gpus=False, max_shard_gpus=0)
    sim = SharingSimulator(trace, FIFO, two, share, prof)
    sim.run()
    j = {x.id: x for x in [*sim.jobs, *sim.opp_jobs]}
    assert j[3].first_start == pytest.approx(30.0) and j[3].finish == pytest.approx(530.0)
    assert j[2].first_start == pytest.approx(1000.0)
    assert sim.unjudged == 1 and sim.agents.pauses == {4: 1}
    # job 4 ran 25 s alone before the pause, 75 s after 530 s
    assert j[4].finish == pytest.approx(530.0 + 75.0)
    assert sim.timeouts == 0


class CheckedSharing(SharingSimulator):
    """After every `_respeed`, its incremental tables must equal a recomputation from
    scratch over every GPU and running job (what `_respeed` did before it kept them)."""

    checks = 0

    def _respeed(self, now: float) -> None:
        super()._respeed(now)
        per_gpu = {}
        for k, g in self.shares.gpus.items():
            active = ([g.guaranteed] if g.guaranteed else []) + [
                o for o in g.opp if o not in self.shares.paused
            ]
            if active:
                sp = speeds([self.profile[j.id] for j in active], self.share.interference)
                per_gpu[k] = dict(zip(active, sp, strict=True))
        job_speed = self.agents.job_speeds(per_gpu)
        busy = [sum(self.profile[j.id].util * job_speed[j] for j in d) for d in per_gpu.values()]
        power = self.share.power
        watts = (
            sum(power.watts(b) for b in busy) + (len(self.shares.gpus) - len(busy)) * power.idle_w
        )
        assert self.meter.watts == pytest.approx(watts, rel=1e-12)
        assert self.meter.busy == pytest.approx(
            sum(min(1.0, b) for b in busy), rel=1e-12, abs=1e-12
        )
        held = sum(1 for g in self.shares.gpus.values() if g.guaranteed is not None or g.opp)
        assert self.meter.holding == held
        for job, tr in self.shares.track.items():
            assert tr.speed == job_speed.get(job, 0.0), job.id
        CheckedSharing.checks += 1


@pytest.mark.parametrize("learnt", [False, True])
def test_incremental_speeds_match_a_full_recomputation(learnt):
    """A seeded 300-job trace on 4 nodes of 4 GPUs (multi-GPU and multi-node jobs, pauses,
    EaCO, time limits): every `_respeed` agrees with recomputing everything."""
    cluster = SimConfig(nodes=4, gpus_per_node=4, preemptive=False)
    jobs = [t for t in synth_jobs(300, 16, 1.3, 7) if t.gpus <= 16]
    trace = with_limits(mark_opportunistic(jobs, 0.4, 7), cluster)
    share = ShareConfig(
        seed=7, max_shard_gpus=0, learnt_placement=learnt, agent=co.Policy(eaco=co.EacoModel())
    )
    CheckedSharing.checks = 0
    sim = CheckedSharing(trace, FIFO, cluster, share)
    sim.run()
    assert CheckedSharing.checks > 300 and sim.agents.pauses and sim.shard_starts


def _long_neighbour() -> tuple[list[TraceJob], dict[int, JobProfile]]:
    """1 node x 2 GPUs, all compute-bound: job 1 holds GPU 0 for 5000 s (limit 7200),
    job 3 holds GPU 1 for 500 s (limit 600); the opportunistic job 2 (1000 s of work,
    limit 3000) arrives at 10 s and gets the shard beside job 1 first."""
    trace = [
        TraceJob(1, 1, 0.0, 5000.0, model_tag="a", time_limit_s=7200.0),
        TraceJob(3, 1, 0.0, 500.0, model_tag="c", time_limit_s=600.0),
        TraceJob(2, 1, 10.0, 1000.0, model_tag="b", opportunistic=True, time_limit_s=3000.0),
    ]
    return trace, {j.job_id: JobProfile(0.99, 0.1) for j in trace}


def test_paused_opportunistic_job_requeued_or_kept_off_long_neighbours():
    """Without a rule job 2 stays paused beside job 1 and is killed at its limit (3010 s).
    Requeued after 300 s paused, it queues again and runs on GPU 1 once job 3 has left.
    With `ends_before` it never goes beside job 1 (whose limit ends after its own): it
    waits beside job 3, paused, and runs once job 3 ends at 500 s."""
    two = SimConfig(nodes=1, gpus_per_node=2, preemptive=False)
    trace, prof = _long_neighbour()
    base = SharingSimulator(trace, FIFO, two, ShareConfig(), prof)
    base.run()
    # killed at its limit (10 + 3000 s) although paused from its start, not when job 1
    # ends at 5000 s and it would resume: Slurm's limit runs while the job is frozen
    assert base.opp_jobs[0].timed_out and base.opp_jobs[0].finish == pytest.approx(3010.0)
    requeue = SharingSimulator(trace, FIFO, two, ShareConfig(max_pause_s=300.0), prof)
    requeue.run()
    o = requeue.opp_jobs[0]
    assert not o.timed_out and requeue.opp_requeues >= 1
    assert 1500.0 <= o.finish <= 2000.0
    ends = SharingSimulator(trace, FIFO, two, ShareConfig(ends_before=True), prof)
    ends.run()
    o = ends.opp_jobs[0]
    assert not o.timed_out and ends.opp_requeues == 0
    assert o.finish == pytest.approx(1500.0)


def test_opportunistic_rules_are_pure():
    from slurm_ext.policy import ends_before, overdue

    assert overdue({1: 0.0, 2: 50.0, 3: 100.0}, 100.0, 50.0) == [1, 2]
    assert overdue({1: 0.0}, 1e9, 0.0) == []
    assert ends_before(500.0, 0.0, 600.0) and not ends_before(700.0, 0.0, 600.0)
    assert not ends_before(None, 0.0, 600.0) and ends_before(500.0, 0.0, None)


def test_requeued_job_kept_off_the_neighbour_that_paused_it():
    """Churn: requeued after 100 s paused, job 2 goes back beside job 1 (5,000 s, the job
    that paused it) and is paused and requeued again and again until GPU 1 frees at 500 s.
    With `after_requeue = "not_beside"` it never returns beside job 1 (nor, after its
    second requeue, beside job 3); with "ends_first" it avoids job 1 (its limit ends
    after job 2's) but not job 3. Each ends as early or earlier, with fewer requeues."""
    two = SimConfig(nodes=1, gpus_per_node=2, preemptive=False)
    trace, prof = _long_neighbour()
    runs = {}
    for rule in ("any", "not_beside", "ends_first"):
        sim = SharingSimulator(
            trace, FIFO, two, ShareConfig(max_pause_s=100.0, after_requeue=rule), prof
        )
        sim.run()
        runs[rule] = sim
    assert runs["any"].opp_requeues == 5 and runs["any"].placement.paused_by == {2: {1}}
    not_beside = runs["not_beside"]
    assert not_beside.opp_requeues == 2 and not_beside.placement.paused_by == {2: {1, 3}}
    assert runs["ends_first"].opp_requeues == 4
    for sim in runs.values():
        assert not sim.opp_jobs[0].timed_out and sim.opp_jobs[0].finish <= 1510.0
    with pytest.raises(ValueError, match="after_requeue"):
        ShareConfig(after_requeue="never")


def test_shard_offered_rule():
    from slurm_ext.policy import shard_offered

    assert shard_offered(1, 7200.0, 0.0, 3000.0)  # no rule: anything
    assert not shard_offered(1, 7200.0, 0.0, 3000.0, ends_first=True)
    kw = dict(paused_by={1}, requeued=True)
    assert not shard_offered(1, 100.0, 0.0, 3000.0, after_requeue="not_beside", **kw)
    assert shard_offered(2, 7200.0, 0.0, 3000.0, after_requeue="not_beside", **kw)
    assert shard_offered(1, 100.0, 0.0, 3000.0, after_requeue="ends_first", **kw)
    assert not shard_offered(2, 7200.0, 0.0, 3000.0, after_requeue="ends_first", **kw)
    assert shard_offered(2, 7200.0, 0.0, 3000.0, after_requeue="ends_first")  # not requeued
    with pytest.raises(ValueError, match="after_requeue"):
        shard_offered(1, None, 0.0, None, after_requeue="sometimes")
