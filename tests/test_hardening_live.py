"""Hardening against a real local Slurm cluster (issue 15): the agent never thaws a job
Slurm itself suspended; a process outside Slurm that sets SLURM_JOB_ID cannot pass for a
job and get a real one paused; a node cannot report for a job Slurm ran elsewhere; the
demo's agent asks the demo cluster's slurmctld.

The harness runs jobs under proctrack/linuxproc, without job cgroups: a job's processes
are mapped by SLURM_JOB_ID, which is exactly the path these tests attack.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agent_jobclass import Clock, Jobs
from test_agent_report import SECRET, make_report

from nodeagent.agent import Agent
from nodeagent.cgroups import read_proc_stat
from nodeagent.config import AgentConfig
from nodeagent.gpu import SimulatedGpuReader
from slurm_ext import demo
from slurm_ext.core.config import load_config
from slurm_ext.core.model import JobClasses
from slurm_ext.core.reports import SIGNATURE_HEADER, encode_reports, sign
from slurm_ext.service.listener import SlurmJobNodes
from slurm_ext.service.metrics import ServiceMetrics, serve_http
from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm
GIB = 2**30


@pytest.fixture(scope="module")
def live() -> Iterator[LocalCluster]:
    c = LocalCluster(
        nodes=2,
        gpus_per_node=1,
        cpus_per_node=2,
        memory_mb=4000,
        extra_conf="PartitionName=opp Nodes=node[1-2] MaxTime=INFINITE State=UP",
    )
    c.start()
    try:
        yield c
    finally:
        c.run("scancel", "--full", "--partition=opp", check=False)
        c.cleanup()


@pytest.fixture
def jobs(live: LocalCluster) -> Iterator[Jobs]:
    j = Jobs(live)
    try:
        yield j
    finally:
        for job in j.ids:  # a suspended job must be resumed before it can end
            live.run("scontrol", "resume", str(job), check=False)
        j.cancel()


def client(cluster: LocalCluster) -> CliSlurmClient:
    return CliSlurmClient(slurm_conf=str(cluster.conf_path), timeout=20)


def proc_state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def wait_state(pid: int, want: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while proc_state(pid) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc_state(pid) == want, f"pid {pid} in state {proc_state(pid)}, wanted {want}"


def slurm_agent(tmp_path: Path, cluster: LocalCluster, node: str, sim, clock) -> Agent:
    cfg = AgentConfig(node_name=node, state_file=str(tmp_path / "state.json"))
    cfg.jobs.source = "slurm"
    cfg.jobs.slurm_conf = str(cluster.conf_path)
    cfg.colocation.memory_high = 0.5
    classes = JobClasses(opportunistic_partitions=("opp",))
    return Agent(cfg, sim, None, clock=clock, wall=clock, slurm=client(cluster), classes=classes)


def test_recovery_thaws_what_the_agent_froze_but_never_a_job_slurm_suspended(tmp_path, live, jobs):
    ours, ours_pid = jobs.submit()
    slurms, slurms_pid = jobs.submit()
    os.kill(ours_pid, 19)  # SIGSTOP: as the agent's sigstop method pauses a job
    wait_state(ours_pid, "T")
    live.run("scontrol", "suspend", str(slurms))
    wait_state(slurms_pid, "T")
    records = []
    for job, pid in ((ours, ours_pid), (slurms, slurms_pid)):
        st = read_proc_stat(pid)
        assert st is not None
        records.append({"job_id": job, "method": "sigstop", "targets": [f"{pid}:{st.start_ticks}"]})
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "paused": records}))

    clock = Clock()
    agent = slurm_agent(tmp_path, live, jobs.node_of(ours), SimulatedGpuReader(1), clock)
    assert agent.coloc.paused == {}
    wait_state(ours_pid, "S")  # thawed: sleeping in `sleep 300` again
    time.sleep(0.5)
    assert proc_state(slurms_pid) == "T"  # Slurm's suspension is Slurm's to end
    state = live.run("squeue", "-h", "-j", str(slurms), "-o", "%T").strip()
    assert state == "SUSPENDED"
    assert json.loads((tmp_path / "state.json").read_text())["paused"] == []


def _stray(job_id: int, user: int | None = None) -> subprocess.Popen:
    """A busy process outside Slurm that claims a job by SLURM_JOB_ID."""
    env = dict(os.environ, SLURM_JOB_ID=str(job_id))
    return subprocess.Popen(
        ["/bin/sh", "-c", "while :; do :; done"],
        env=env,
        user=user,
        cwd="/",
        start_new_session=True,
    )


def test_a_stray_process_with_slurm_job_id_cannot_get_a_real_job_paused(tmp_path, live, jobs):
    guaranteed, g_pid = jobs.submit("-w", "node1")
    opportunistic, o_pid = jobs.submit("-w", "node1", "--partition=opp")
    strays = [_stray(999999), _stray(guaranteed, user=65534)]
    try:
        time.sleep(0.3)  # exec'd: their environment is theirs
        clock = Clock()
        sim = SimulatedGpuReader(1, clock=clock)
        sim.assign(o_pid, 0, 10 * GIB, 0.3)
        agent = slurm_agent(tmp_path, live, "node1", sim, clock)
        for stray in strays:  # each alone beside the real opportunistic job, memory 75 %
            sim.assign(stray.pid, 0, 50 * GIB, 0.9)
            clock.t += 5
            assert agent.step() == []
            assert agent.coloc.paused == {}
            assert 999999 not in agent.accounts
            assert (
                guaranteed not in agent.snapshot.jobs
                or stray.pid not in agent.snapshot.jobs[guaranteed].pids
            )
            sim.remove(stray.pid)
        # the real guaranteed job in the same place does get it paused: the test can fail
        sim.assign(g_pid, 0, 50 * GIB, 0.9)
        clock.t += 5
        actions = agent.step()
        assert [(a.kind, a.job_id) for a in actions] == [("pause", opportunistic)]
        agent.resume_all("test")
        wait_state(o_pid, "S")
    finally:
        for stray in strays:
            stray.kill()
            stray.wait(10)


def _post(port: int, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("POST", "/v1/reports", body=body, headers={SIGNATURE_HEADER: sign(body, SECRET)})
    resp = conn.getresponse()
    status, text = resp.status, resp.read()
    conn.close()
    return status, json.loads(text) if status == 200 else {}


def test_a_node_cannot_report_for_a_job_slurm_ran_elsewhere(tmp_path, live, jobs):
    job, _ = jobs.submit("-w", "node1")
    db = tmp_path / "service.db"
    Store(db).close()

    def save(reports):
        store = Store(db)
        try:
            return store.add_reports(reports)
        finally:
            store.close()

    server = serve_http(
        "127.0.0.1", 0, ServiceMetrics(), SECRET, save, job_nodes=SlurmJobNodes(client(live))
    )
    port = server.server_address[1]
    try:
        body = encode_reports("node2", [make_report(job, node="node2")])
        assert _post(port, body) == (200, {"accepted": 0, "refused_jobs": [job]})
        body = encode_reports("node1", [make_report(job, node="node1")])
        assert _post(port, body) == (200, {"accepted": 1, "refused_jobs": []})
        store = Store(db, readonly=True)
        assert [r.node for r in store.reports(job)] == ["node1"]
        store.close()
    finally:
        server.shutdown()


def test_the_demo_agent_asks_the_demo_clusters_slurm(tmp_path, live, jobs, monkeypatch):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    job, _ = jobs.submit("-w", "node1")
    toml = tmp_path / "agent.toml"
    toml.write_text(
        demo.agent_toml(tmp_path, live.conf_path, 1, tmp_path / "secret", 2, tmp_path / "p.json")
    )
    cfg = load_config(AgentConfig, toml)  # the file the demo's agent process reads
    agent = Agent(cfg, SimulatedGpuReader(4), None)
    assert agent.job_info is not None
    answer = agent.job_info.lookup([job], 0.0)  # was: "Could not establish a configuration"
    assert answer.error is None and job in answer.info


def test_with_slurm_silent_a_frozen_job_stays_frozen_until_thaw_force(tmp_path, live, jobs):
    job, pid = jobs.submit()
    os.kill(pid, 19)  # SIGSTOP, as the agent's sigstop method pauses a job
    wait_state(pid, "T")
    st = read_proc_stat(pid)
    assert st is not None
    record = {"job_id": job, "method": "sigstop", "targets": [f"{pid}:{st.start_ticks}"]}
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "paused": [record]}))
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'node_name = "{jobs.node_of(job)}"\nstate_file = "{tmp_path / "state.json"}"\n'
        '[gpu]\nbackend = "none"\n[exporter]\nenabled = false\n'
        f'[jobs]\nsource = "slurm"\nslurm_conf = "{live.conf_path}"\ntimeout_s = 5\n'
    )
    thaw = [sys.executable, "-m", "nodeagent.cli", "thaw", "--config", str(cfg), "--wait", "1"]
    live.stop_slurmctld()
    try:
        res = subprocess.run(thaw, capture_output=True, text=True, timeout=120)
        assert res.returncode == 1 and f"jobs [{job}] stay frozen" in res.stderr, res.stderr
        assert proc_state(pid) == "T"  # Slurm could not say it did not suspend it
        kept = json.loads((tmp_path / "state.json").read_text())["paused"]
        assert [p["job_id"] for p in kept] == [job]
        res = subprocess.run([*thaw, "--force"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        wait_state(pid, "S")
    finally:
        live.start_slurmctld()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if live.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip():
                break
            time.sleep(0.5)
