"""Who uses a GPU (psutil on the PIDs a GPU lists), the host view, the frozen step
snapshot, and the agent CLI's --version / -v. Real processes started here, one of them
as `nobody` in no job; simulated GPUs list them as NVML would."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from nodeagent import __version__
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.gpu import SimulatedGpuReader
from nodeagent.procinfo import MAX_COMMAND, ProcessDescriber

AGENT = [sys.executable, "-m", "nodeagent.cli"]
GIB = 2**30


@pytest.fixture
def outsider():
    """A busy process of user `nobody` in no job, with a long command line."""
    p = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done", "x" * 400], user="nobody")
    yield p
    p.kill()
    p.wait(10)


def test_describer_names_owner_command_cpu_and_memory(outsider):
    sim = SimulatedGpuReader(2)
    sim.assign(outsider.pid, 1, GIB, 0.3)
    sim.assign(os.getpid(), 0, 2 * GIB, 0.5)
    d = ProcessDescriber()
    first = {p.pid: p for p in d.describe(sim.read(), {os.getpid(): 77})}
    time.sleep(0.5)
    again = {p.pid: p for p in d.describe(sim.read(), {os.getpid(): 77})}
    out = again[outsider.pid]
    assert (out.gpu, out.uuid, out.job_id) == ("1", sim.uuid(1), None)
    assert out.user == "nobody" and out.gpu_memory_bytes == GIB
    assert out.command.startswith("/bin/sh -c while") and len(out.command) == MAX_COMMAND
    assert first[outsider.pid].cpu_percent is None  # nothing to measure against yet
    assert out.cpu_percent is not None and out.cpu_percent > 0  # a busy loop
    assert out.rss_bytes is not None and out.rss_bytes > 0
    me = again[os.getpid()]
    assert me.job_id == 77 and me.user == psutil.Process().username()
    # gone from the GPU: forgotten
    sim.remove(os.getpid())
    assert [p.pid for p in d.describe(sim.read(), {})] == [outsider.pid]
    assert set(d._procs) == {outsider.pid}
    # listed by a GPU but exited before psutil looks: blanks, never an exception
    listed = sim.read()
    outsider.kill()
    outsider.wait(10)
    [gone] = d.describe(listed, {})
    assert (gone.pid, gone.user, gone.command, gone.rss_bytes) == (outsider.pid, "", "", None)
    assert d._procs == {}


def test_host_view_matches_the_kernel():
    d = ProcessDescriber()
    h0 = d.host()
    assert h0.cpu_utilization is None and h0.cpu_count == os.cpu_count()
    time.sleep(0.2)
    h = d.host()
    assert h.cpu_utilization is not None and 0.0 <= h.cpu_utilization <= 1.0
    meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    assert h.memory_total_bytes == int(meminfo["MemTotal"].split()[0]) * 1024
    assert 0 < h.memory_available_bytes <= h.memory_total_bytes


def test_snapshot_is_frozen_and_one_step_whole(tmp_path, cg, outsider):
    pid = cg.start(321, env={"SLURM_JOB_QOS": "normal"})
    sim = SimulatedGpuReader(1)
    sim.assign(pid, 0, GIB, 0.4)
    sim.assign(outsider.pid, 0, GIB // 2, 0.1)
    cfg = AgentConfig(node_name="n1", state_file="")
    cfg.jobs.source = "environ"
    agent = Agent(cfg, sim, None)
    agent.step()
    snap = agent.snapshot
    assert snap.samples_total == 1 and snap.jobs[321].pids == (pid,)
    assert [(p.pid, p.user) for p in snap.outside_jobs()] == [(outsider.pid, "nobody")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.samples_total = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.jobs[999] = snap.jobs[321]  # type: ignore[index]
    with pytest.raises(TypeError):
        snap.error_counts["x"] = 1  # type: ignore[index]
    cg.procs[0].kill()
    cg.procs[0].wait(10)
    agent.step()
    # the job ended in the second step: the new snapshot says so, the old one is unchanged
    assert 321 not in agent.snapshot.jobs and agent.snapshot.samples_total == 2
    assert 321 in snap.jobs and snap.samples_total == 1


def test_show_names_the_user_of_a_gpu_outside_any_job(tmp_path, outsider):
    placement = tmp_path / "gpu-processes.json"
    placement.write_text(json.dumps([{"pid": outsider.pid, "gpu": 0, "memory_bytes": GIB}]))
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[gpu]\nbackend = "simulated"\nsimulated_count = 1\n'
        f'simulated_processes_file = "{placement}"\n[jobs]\nsource = "environ"\n'
    )
    r = subprocess.run(
        [*AGENT, "show", "--config", str(cfg), "--json", "--wait", "0.3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [p] = doc["gpu_processes"]
    assert (p["pid"], p["user"], p["job_id"], p["gpu_memory_bytes"]) == (
        outsider.pid,
        "nobody",
        None,
        GIB,
    )
    assert p["cpu_percent"] > 0 and doc["host"]["cpu_count"] == os.cpu_count()
    r = subprocess.run(
        [*AGENT, "show", "--config", str(cfg), "--wait", "0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"pid {outsider.pid} NO JOB user=nobody" in r.stdout


def test_version_and_verbose(tmp_path):
    for flag in ("--version", "-V"):  # -v is --verbose, as in slurm-ext
        r = subprocess.run([*AGENT, flag], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == f"slurm-ext-agent, version {__version__}"
    cfg = tmp_path / "agent.toml"  # no RAPL there: a warning to log, or not
    cfg.write_text(f'[energy]\nrapl_root = "{tmp_path}/none"\n[jobs]\nsource = "environ"\n')
    show = ["show", "--config", str(cfg), "--backend", "none", "--wait", "0"]
    quiet = subprocess.run([*AGENT, *show], capture_output=True, text=True, timeout=60)
    loud = subprocess.run([*AGENT, "-v", *show], capture_output=True, text=True, timeout=60)
    assert quiet.returncode == loud.returncode == 0
    assert quiet.stderr == ""
    assert "WARNING nodeagent.energy: RAPL powercap unavailable" in loud.stderr
