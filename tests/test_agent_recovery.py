"""A pause never outlives the agent: real processes in real Slurm-like cgroups, frozen by
a real agent process that is then killed with SIGKILL mid-report; a state file that is
truncated or holds keys from another version still lets the next start thaw the job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for
from test_agent_loop import Clock, _paused_agent, make_agent

from nodeagent.gpu import SimulatedGpuReader
from nodeagent.testing import BUSY, SlurmLikeCgroups, runs

GIB = 2**30


def frozen(c: SlurmLikeCgroups, job: int) -> bool:
    d = c.step_dir(job)
    if c.version == 1:
        return (d.parent / "freezer.state").read_text().strip() == "FROZEN"
    return "frozen 1" in (d / "cgroup.events").read_text()


def agent_config(tmp: Path, placement: Path, url: str) -> Path:
    cfg = tmp / "agent.toml"
    secret = tmp / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    classes = tmp / "classes.toml"
    classes.write_text('opportunistic_qos = ["scavenger"]\n')
    cfg.write_text(
        f'node_name = "n1"\ninterval_s = 0.3\nstate_file = "{tmp / "state.json"}"\n'
        f'classes_file = "{classes}"\n'
        f'[gpu]\nbackend = "simulated"\nsimulated_count = 1\n'
        f'simulated_processes_file = "{placement}"\n'
        f'[energy]\nrapl_root = "{tmp / "no-rapl"}"\n'
        "[exporter]\nenabled = false\n"
        f'[report]\nenabled = true\nservice_url = "{url}"\nsecret_file = "{secret}"\n'
        f'interval_s = 60\ntimeout_s = 60\nspool_dir = "{tmp / "spool"}"\n'
        '[jobs]\nsource = "environ"\n'
        "[colocation.tuning]\nmemory_high = 0.5\n"
    )
    return cfg


def test_kill_9_while_the_report_hangs_leaves_a_record_and_thaw_resumes_the_job(tmp_path, cg):
    g_pid = cg.start(801, BUSY)
    o_pid = cg.start(802, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    placement = tmp_path / "placement.json"
    placement.write_text(
        json.dumps(
            [
                {"pid": g_pid, "gpu": 0, "memory_bytes": 50 * GIB, "sm_util": 0.9},
                {"pid": o_pid, "gpu": 0, "memory_bytes": 10 * GIB, "sm_util": 0.3},
            ]
        )
    )
    # a "service" that takes the connection and never answers: the report POST hangs
    hang = socket.create_server(("127.0.0.1", 0), backlog=8)
    cfg = agent_config(tmp_path, placement, f"http://127.0.0.1:{hang.getsockname()[1]}")
    log = open(tmp_path / "agent.log", "ab")
    agent = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.cli", "run", "--config", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: frozen(cg, 802), timeout=30, what="the opportunistic job frozen")
        time.sleep(0.5)  # the agent is now inside its report POST
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        hang.close()
    assert frozen(cg, 802)
    state = json.loads((tmp_path / "state.json").read_text())
    assert [p["job_id"] for p in state["paused"]] == [802]

    res = subprocess.run(
        [sys.executable, "-m", "nodeagent.cli", "thaw", "--config", str(cfg), "--wait", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert not frozen(cg, 802)
    assert runs([o_pid])  # runs again
    assert json.loads((tmp_path / "state.json").read_text())["paused"] == []


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_a_truncated_state_file_still_thaws_the_job(tmp_path, cg, keep):
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    path = tmp_path / "state.json"
    text = path.read_text()
    path.write_text(text[: max(int(len(text) * keep), text.index("]}") + 2)])
    del agent  # a crash, then a start with the damaged file
    again = make_agent(tmp_path, clock, sim)
    assert again.coloc.paused == {}
    assert runs([o_pid])


def test_unknown_keys_and_garbage_do_not_stop_recovery(tmp_path, cg, caplog):
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    path = tmp_path / "state.json"
    doc = json.loads(path.read_text())
    doc["accounts"][0]["from_a_newer_version"] = 1
    doc["accounts"].append({"job_id": "x", "first_seen": []})
    doc["solo_util"] = ["not", "a", "mapping"]
    doc["paused"].append({"job_id": 5, "method": "rm -rf", "targets": []})
    doc["something_new"] = {"a": 1}
    path.write_text(json.dumps(doc))
    del agent
    again = make_agent(tmp_path, clock, sim)
    assert again.coloc.paused == {}
    assert runs([o_pid])
    assert 601 in again.accounts  # the readable account is kept
    assert "from_a_newer_version" in caplog.text and "solo_util unreadable" in caplog.text


@pytest.mark.parametrize("lost", ["emptied", "deleted"])
def test_a_job_left_frozen_without_a_record_is_found_and_thawed(tmp_path, cg, caplog, lost):
    """The state file is emptied (or deleted) while the agent is down, and the guaranteed
    job leaves meanwhile: nothing records the pause, the cgroup scan finds it."""
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    path = tmp_path / "state.json"
    if lost == "emptied":
        path.write_text("")
    else:
        path.unlink()
    del agent  # a crash
    guaranteed = cg.procs[0]
    guaranteed.kill()
    guaranteed.wait()
    again = make_agent(tmp_path, clock, sim)
    assert frozen(cg, 602)
    clock.t += 5
    actions = again.step()
    assert [(a.kind, a.job_id, a.code) for a in actions] == [("resume", 602, "idle")]
    assert not frozen(cg, 602) and runs([o_pid])
    assert "job 602 found frozen (cgroup-v" in caplog.text
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == (1 if lost == "emptied" else 0)
    assert json.loads(path.read_text())["paused"] == []  # a fresh state file


def test_a_job_found_frozen_stays_paused_while_its_guaranteed_neighbour_is_busy(tmp_path, cg):
    """Found frozen with no record, it is the agent's pause: the co-location rules keep it
    while the guaranteed job beside it is busy, and thaw it when that job leaves."""
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    agent, o_pid = _paused_agent(tmp_path, cg, clock, sim)
    (tmp_path / "state.json").write_text('{"paused": [{"job_id": 6')  # cut in the record
    del agent
    again = make_agent(tmp_path, clock, sim)
    clock.t += 5
    assert again.step() == []
    assert list(again.coloc.paused) == [602] and frozen(cg, 602)
    assert again.snapshot.jobs[602].paused
    saved = json.loads((tmp_path / "state.json").read_text())
    assert [p["job_id"] for p in saved["paused"]] == [602]  # recorded again
    guaranteed = cg.procs[0]
    guaranteed.kill()
    guaranteed.wait()
    clock.t += 5
    assert [(a.kind, a.job_id) for a in again.step()] == [("resume", 602)]
    assert runs([o_pid])


def test_a_pause_that_cannot_be_recorded_is_not_made(tmp_path, cg):
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    g_pid = cg.start(611)
    o_pid = cg.start(612, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    sim.assign(g_pid, 0, GIB, 0.9)
    agent = make_agent(tmp_path, clock, sim)
    agent.step()
    state_dir = tmp_path / "ro"
    state_dir.mkdir()
    agent.config.state_file = str(state_dir / "state.json")
    os.chmod(state_dir, 0o500)
    try:
        if os.access(state_dir, os.W_OK):  # root ignores the mode: use a path under a file
            agent.config.state_file = str(tmp_path / "state.json" / "x")
        clock.t += 5
        sim.assign(o_pid, 0, GIB, 0.5)
        sim.assign(g_pid, 0, GIB, 0.3)
        agent.step()
        assert agent.coloc.paused == {}
        assert runs([o_pid])
    finally:
        os.chmod(state_dir, 0o700)


def test_the_unit_thaws_after_any_stop_within_its_stop_timeout():
    unit = (Path(__file__).parents[1] / "etc" / "slurm-ext-agent.service").read_text()
    post = [line for line in unit.splitlines() if line.startswith("ExecStopPost=")]
    assert len(post) == 1 and " thaw " in post[0] and "--config" in post[0]
    wait = float(post[0].split("--wait ")[1].split()[0])
    stop = float(
        next(x for x in unit.splitlines() if x.startswith("TimeoutStopSec=")).split("=")[1]
    )
    assert wait < stop  # systemd would kill the thaw before it gave up on Slurm


def test_one_agent_per_state_file_and_no_thaw_beside_a_running_agent(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'node_name = "n1"\ninterval_s = 0.5\nstate_file = "{tmp_path / "state.json"}"\n'
        '[gpu]\nbackend = "none"\n[exporter]\nenabled = false\n[jobs]\nsource = "environ"\n'
    )
    cli = [sys.executable, "-m", "nodeagent.cli"]
    agent = subprocess.Popen([*cli, "run", "--config", str(cfg)], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (tmp_path / "state.json").exists(), timeout=30, what="agent running")
        for argv in (["run", "--once"], ["thaw", "--wait", "0"]):
            res = subprocess.run(
                [*cli, *argv, "--config", str(cfg)], capture_output=True, text=True, timeout=60
            )
            assert res.returncode == 2 and "state.json.lock" in res.stderr, res.stderr
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
    res = subprocess.run(
        [*cli, "thaw", "--wait", "0", "--config", str(cfg)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr  # the agent is gone: the lock with it
