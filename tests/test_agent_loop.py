"""The whole agent loop end to end: simulated GPUs carrying real processes in real
Slurm-like cgroups; attribution, pausing, resuming, shutdown, recovery, reports, metrics."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_for
from prometheus_client import generate_latest
from test_agent_report import SECRET, _Service

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.energy import RaplReader
from nodeagent.exporter import make_jobstats_registry, make_registry
from nodeagent.gpu import SimulatedGpuReader
from nodeagent.report import ReportSender
from nodeagent.testing import BUSY, cpu_used_during, runs
from slurm_ext.core.model import JobClasses

GIB = 2**30
SCAVENGER = JobClasses(opportunistic_qos=("scavenger",))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_agent(tmp_path, clock, sim, rapl_dir=None, sender=None) -> Agent:
    cfg = AgentConfig(node_name="gpu01", state_file=str(tmp_path / "state.json"))
    cfg.jobs.source = "environ"  # these jobs exist only as cgroups: no Slurm to ask
    cfg.colocation.slow_fraction = 0.7
    rapl = RaplReader(rapl_dir) if rapl_dir else None
    return Agent(cfg, sim, rapl, sender=sender, clock=clock, wall=clock, classes=SCAVENGER)


def test_attribution_pause_resume_end_to_end(tmp_path, cg):
    clock = Clock()
    sim = SimulatedGpuReader(2, clock=clock)
    rapl = tmp_path / "rapl" / "intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "max_energy_range_uj").write_text("262143328850\n")
    (rapl / "energy_uj").write_text("1000000\n")
    g_pid = cg.start(501, env={"SLURM_JOB_QOS": "normal"})
    o_pid = cg.start(502, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    sim.set_gpu(0, power_w=400.0, util=0.8)
    sim.assign(g_pid, 0, 10 * GIB, 0.8)
    agent = make_agent(tmp_path, clock, sim, rapl.parent)
    assert agent.step() == []
    assert agent.accounts[501].klass == "guaranteed"
    assert agent.accounts[502].klass == "opportunistic", agent.accounts[502]

    # the opportunistic job joins GPU 0 and the guaranteed one drops to half its solo level
    clock.t += 5
    sim.assign(o_pid, 0, 5 * GIB, 0.2)
    sim.assign(g_pid, 0, 10 * GIB, 0.4)
    (rapl / "energy_uj").write_text("51000000\n")  # +50 J of CPU package energy
    time.sleep(0.3)  # real CPU time for the busy job to be charged for
    actions = agent.step()
    assert [(a.kind, a.job_id, a.code) for a in actions] == [("pause", 502, "slowdown")]
    # 400 W x 5 s = 2000 J on GPU 0, split 0.4 : 0.2 by GPU time
    assert agent.accounts[501].gpu_energy_j == pytest.approx(2000 * 2 / 3)
    assert agent.accounts[502].gpu_energy_j == pytest.approx(2000 / 3)
    assert agent.gpu_energy_total[sim.uuid(1)] == pytest.approx(70.0 * 5)  # idle GPU 1
    cpu_j = agent.accounts[501].cpu_energy_j + agent.accounts[502].cpu_energy_j
    assert 0 < cpu_j <= 50.0 + 1e-9 and agent.accounts[502].cpu_energy_j > 0
    cpu_used_during([o_pid], 0.1)
    assert cpu_used_during([o_pid], 0.4) < 0.02  # really stopped

    # guaranteed busy again: the opportunistic job stays paused, frozen on the GPU
    clock.t += 5
    sim.assign(o_pid, 0, 5 * GIB, 0.0)
    sim.assign(g_pid, 0, 10 * GIB, 0.8)
    assert agent.step() == []
    assert 502 in agent.coloc.paused
    # its report says since when (the service requeues long pauses), the other's nothing
    paused_at = agent.accounts[502].paused_since
    assert paused_at == clock() - 5 and agent.accounts[501].paused_since is None
    assert agent.accounts[502].report("n", final=False).paused_since == paused_at

    # guaranteed idles: resumed, and it runs again
    clock.t += 5
    sim.assign(g_pid, 0, 10 * GIB, 0.0)
    actions = agent.step()
    assert [(a.kind, a.job_id, a.code) for a in actions] == [("resume", 502, "idle")]
    assert agent.accounts[502].paused_since is None
    assert runs([o_pid])

    acc = agent.accounts[501]
    assert acc.gpu_seconds == pytest.approx(15.0)
    assert acc.util_peak == pytest.approx(0.8)
    assert acc.util_weighted / acc.util_seconds == pytest.approx((0.4 + 0.8 + 0.0) / 3)
    assert acc.mem_peak_bytes == 10 * GIB
    assert acc.gpu_uuids == [sim.uuid(0)]

    text = generate_latest(make_registry(agent)).decode()
    assert 'slurm_ext_job_gpu_energy_joules_total{jobid="501"}' in text
    assert 'slurm_ext_colocation_actions_total{action="pause",reason="slowdown"} 1.0' in text
    assert (
        'slurm_ext_gpu_power_watts{gpu="0",model_name="Simulated H100",uuid="GPU-sim-0000"} 400.0'
        in text
    )
    assert "nvidia_gpu" not in text  # jobstats' names are served apart, on /jobstats
    compat = generate_latest(make_jobstats_registry(agent)).decode()
    assert (
        'nvidia_gpu_jobId{minor_number="0",name="Simulated H100",uuid="GPU-sim-0000"} 501.0'
        in compat
    )


def _paused_agent(tmp_path, cg, clock, sim):
    g_pid = cg.start(601)
    o_pid = cg.start(602, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    sim.assign(g_pid, 0, GIB, 0.9)
    agent = make_agent(tmp_path, clock, sim)
    agent.step()
    clock.t += 5
    sim.assign(o_pid, 0, GIB, 0.5)
    sim.assign(g_pid, 0, GIB, 0.3)
    assert [a.kind for a in agent.step()] == ["pause"]
    cpu_used_during([o_pid], 0.1)
    assert cpu_used_during([o_pid], 0.3) < 0.02
    return agent, o_pid


def test_shutdown_resumes_paused_jobs(tmp_path, cg):
    import threading

    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    stop = threading.Event()
    stop.set()
    agent.run(stop)  # stop already set: no sample, straight to the shutdown path
    assert agent.coloc.paused == {}
    assert runs([o_pid])
    assert json.loads((tmp_path / "state.json").read_text())["paused"] == []


def test_restart_recovers_paused_jobs_and_keeps_counters(tmp_path, cg):
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    sim.set_gpu(0, power_w=300.0)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    before = agent.accounts[601].gpu_energy_j
    assert before > 0
    del agent  # a crash: no shutdown path ran
    again = make_agent(tmp_path, clock, sim)  # start-up recovery
    assert runs([o_pid])
    assert again.coloc.paused == {}
    assert again.coloc.action_counts[("resume", "recovery")] == 1
    assert again.accounts[601].gpu_energy_j == pytest.approx(before)
    clock.t += 5
    again.step()
    clock.t += 5
    again.step()
    assert again.accounts[601].gpu_energy_j > before  # monotonic across the restart


def test_reports_reach_the_service_and_final_on_job_end(tmp_path, cg):
    service = _Service(jobs={701})
    try:
        clock = Clock()
        sim = SimulatedGpuReader(1, clock=clock)
        sim.set_gpu(0, power_w=200.0)
        sender = ReportSender(service.url, "gpu01", SECRET, tmp_path / "spool", timeout=5)
        agent = make_agent(tmp_path, clock, sim, sender=sender)
        pid = cg.start(701)
        sim.assign(pid, 0, 3 * GIB, 0.5)
        agent.step()  # the report is sent by the sender's thread, not in the step
        wait_for(lambda: service.received, what="the first report")
        assert [(r.job_id, r.final) for r in service.received] == [(701, False)]
        clock.t += 10
        agent.step()  # within the report interval: nothing sent
        time.sleep(0.5)
        assert len(service.received) == 1
        proc = cg.procs[-1]
        proc.kill()
        proc.wait()
        clock.t += 10
        agent.step()
        wait_for(lambda: len(service.received) == 2, what="the final report")
        final = service.received[-1]
        assert (final.job_id, final.final, final.node) == (701, True, "gpu01")
        assert final.gpu_seconds == pytest.approx(10.0)
        assert final.gpu_util_mean == pytest.approx(0.5)
        assert final.gpu_mem_peak_bytes == 3 * GIB
        assert final.gpu_type == "Simulated H100"
        assert 701 not in agent.accounts
        agent.reports.close(1.0)
    finally:
        service.close()


def test_progress_drop_pauses_the_opportunistic_job_until_the_guaranteed_one_ends(tmp_path, cg):
    """Utilisation never drops here: only the guaranteed job's progress file shows it slowed."""
    clock = Clock()  # also the agent's wall clock: progress lines are stamped with it
    sim = SimulatedGpuReader(1, clock=clock)
    prog = tmp_path / "progress"
    prog.write_text("")
    g_pid = cg.start(801, env={"SLURM_JOB_QOS": "normal", "SLURM_EXT_PROGRESS_FILE": str(prog)})
    o_pid = cg.start(802, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    sim.assign(g_pid, 0, GIB, 0.8)
    agent = make_agent(tmp_path, clock, sim)
    count = 0

    def run_for(seconds: int, per_s: int) -> list:
        nonlocal count
        with prog.open("a") as f:  # a line a second, as the job would write them
            for _ in range(seconds):
                clock.t += 1
                count += per_s
                f.write(f"{clock.t:.3f} {count}\n")
        return [(a.kind, a.job_id, a.code) for a in agent.step()]

    assert run_for(5, 100) == []
    for _ in range(3):  # alone: three solo samples of 100/s
        assert run_for(5, 100) == []
    assert agent.coloc.state.solo_rate[801] == pytest.approx(100.0)
    assert agent.coloc.state.solo_rate_n[801] == 4
    sim.assign(o_pid, 0, GIB, 0.3)  # the opportunistic job joins; GPU util of 801 stays 0.8
    assert run_for(5, 100) == []
    assert 802 not in agent.coloc.paused
    assert runs([o_pid])
    assert run_for(5, 40) == [("pause", 802, "progress")]  # 40/s < 0.7 x 100/s
    cpu_used_during([o_pid], 0.1)
    assert cpu_used_during([o_pid], 0.4) < 0.02  # really stopped
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["solo_rate"] == {"801": pytest.approx(100.0)}
    assert saved["solo_rate_n"] == {"801": 4}
    text = generate_latest(make_registry(agent)).decode()
    assert 'slurm_ext_colocation_actions_total{action="pause",reason="progress"} 1.0' in text

    assert run_for(5, 100) == []  # back at speed, still busy: stays paused
    assert 802 in agent.coloc.paused
    proc = next(p for p in cg.procs if p.pid == g_pid)
    proc.kill()  # the guaranteed job ends
    proc.wait()
    assert run_for(1, 0) == [("resume", 802, "idle")]
    assert runs([o_pid])
    assert 801 not in agent.coloc.state.solo_rate and 801 not in agent.coloc.progress.jobs


def test_gpu_lost_and_missing_energy_counter_do_not_stop_the_agent(tmp_path):
    clock = Clock()
    sim = SimulatedGpuReader(2, clock=clock)
    sim.set_gpu(0, failed=True)
    sim.set_gpu(1, energy_counter=False, power_w=100.0)
    agent = make_agent(tmp_path, clock, sim)
    agent.step()
    clock.t += 4
    agent.step()
    assert agent.gpu_energy_total[sim.uuid(1)] == pytest.approx(400.0)  # integrated power
    assert agent.error_counts["gpu"] >= 2


def test_eaco_verdicts_survive_a_restart(tmp_path):
    """A withdrawn EaCO admission must not be granted again by the next agent process."""
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent = make_agent(tmp_path, clock, sim)
    agent.coloc.state.admitted = {7}
    agent.coloc.state.refused = {8: "measured slowdown 0.400 above bound 0.100"}
    agent.save_state()
    again = make_agent(tmp_path, clock, sim)
    assert again.coloc.state.admitted == {7}
    assert again.coloc.state.refused == {8: "measured slowdown 0.400 above bound 0.100"}


def test_eaco_verdict_inputs_learnt_or_configured_in_reason_and_metrics(tmp_path, cg):
    """EaCO on: job 612 beside guaranteed job 611 is judged on the configured inputs
    (admitted); job 613, whose kind history predicts a 12 % slowdown of job 611, is
    refused on learnt inputs. Both verdicts are counted by inputs in the metrics."""
    from slurm_ext.policy import Prediction

    clock = Clock()
    sim = SimulatedGpuReader(2, clock=clock)
    g_pid = cg.start(611, env={"SLURM_JOB_QOS": "normal"})
    o1 = cg.start(612, env={"SLURM_JOB_QOS": "scavenger"})
    sim.set_gpu(0, power_w=300.0, util=0.6)
    sim.assign(g_pid, 0, 10 * GIB, 0.6)
    cfg = AgentConfig(node_name="gpu01", state_file=str(tmp_path / "state.json"))
    cfg.jobs.source = "environ"
    cfg.colocation.eaco.enabled = True
    cfg.colocation.eaco.gpu_idle_w = 100.0
    agent = Agent(cfg, sim, None, clock=clock, wall=clock, classes=SCAVENGER)
    assert agent.step() == []  # solo power 300 W learnt
    clock.t += 5
    sim.assign(o1, 0, 5 * GIB, 0.2)
    sim.assign(g_pid, 0, 10 * GIB, 0.6)
    assert agent.step() == [] and agent.coloc.state.admitted == {612}
    o2 = cg.start(613, env={"SLURM_JOB_QOS": "scavenger"})
    agent.coloc.state.predictions[611] = Prediction(slowdown=0.12, source="model history")
    clock.t += 5
    sim.assign(o2, 0, 5 * GIB, 0.1)
    actions = agent.step()
    assert [(a.kind, a.job_id, a.code) for a in actions] == [("pause", 613, "eaco")]
    assert "(learnt: slowdown 0.120 of job 611's model history)" in actions[0].reason
    text = generate_latest(make_registry(agent)).decode()
    assert 'slurm_ext_eaco_verdicts_total{inputs="configured",verdict="admitted"} 1.0' in text
    assert 'slurm_ext_eaco_verdicts_total{inputs="learnt",verdict="refused"} 1.0' in text
    agent.resume_all("test end")
