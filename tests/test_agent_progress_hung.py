"""A progress file on a mount whose reads never return (a real FUSE mount that leaves
READ unanswered, as a hung NFS server or a stalled user FUSE daemon does) must not stall
the agent: the read is abandoned, progress is unknown, pausing and resuming go on."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hungfs import HungFs
from test_agent_loop import Clock, make_agent

from nodeagent.gpu import SimulatedGpuReader
from nodeagent.progress import PROGRESS_ENV, ProgressReader
from nodeagent.testing import BUSY, runs

GIB = 2**30


@pytest.fixture
def hung(tmp_path):
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        pytest.skip("needs /dev/fuse and root to mount a FUSE file system")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        fs = HungFs(mnt, "progress", uid=os.geteuid())
    except OSError as exc:
        pytest.skip(f"cannot mount FUSE here: {exc}")
    yield fs
    fs.close()


def test_a_read_that_never_returns_is_abandoned_and_not_repeated(hung, cg):
    path = str(hung.mountpoint / "progress")
    pid = cg.start(631, env={PROGRESS_ENV: path})
    from nodeagent.cgroups import read_proc_stat

    st = read_proc_stat(pid)
    assert st is not None
    reader = ProgressReader(timeout_s=0.3)
    answers: list = []

    def ask() -> None:
        for _ in range(3):
            t0 = time.monotonic()
            answers.append((reader.rate(631, [(pid, st.start_ticks)], time.time()), t0))
            answers[-1] = (answers[-1][0], time.monotonic() - t0)

    threads_before = threading.active_count()
    caller = threading.Thread(target=ask, daemon=True)
    caller.start()
    caller.join(5)
    assert not caller.is_alive(), "the progress read blocked its caller"
    assert [rate for rate, _ in answers] == [None, None, None]
    assert answers[0][1] < 1.0 and answers[1][1] < 0.1 and answers[2][1] < 0.1
    assert hung.reads_waiting == 1  # abandoned once, not read again while it hangs
    assert threading.active_count() - threads_before <= 1  # the one stuck reader
    hung.close()  # the mount goes away: the stuck read returns and its thread ends
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in reader.stuck.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.is_alive() for t in reader.stuck.values())


def test_pausing_and_resuming_go_on_while_a_progress_read_hangs(tmp_path, hung, cg):
    clock = Clock()
    sim = SimulatedGpuReader(1, clock=clock)
    g_pid = cg.start(641, env={PROGRESS_ENV: str(hung.mountpoint / "progress")})
    o_pid = cg.start(642, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    sim.assign(g_pid, 0, GIB, 0.9)
    agent = make_agent(tmp_path, clock, sim)
    agent.config.colocation.progress = True
    result: list = []

    def run() -> None:
        t0 = time.monotonic()
        agent.step()  # solo level learnt; the progress read hangs and is abandoned
        clock.t += 5
        sim.assign(o_pid, 0, GIB, 0.5)
        sim.assign(g_pid, 0, GIB, 0.3)
        result.append([a.kind for a in agent.step()])
        clock.t += 5
        sim.assign(g_pid, 0, GIB, 0.0)
        t1 = time.monotonic()
        result.append([a.kind for a in agent.step()])
        result.append((t1 - t0, time.monotonic() - t1))

    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(10)
    assert not caller.is_alive(), "the agent's loop blocked on the progress file"
    assert result[0] == ["pause"] and result[1] == ["resume"]
    assert result[2][1] < 0.5  # the resume did not wait on the hung read
    assert runs([o_pid])
