"""A slow or hostile report endpoint cannot freeze the agent: real agent processes, real
sockets on 127.0.0.1, real Slurm-like cgroups. Against a "service" that drips its answer
a byte a second, or takes the connection and never answers, the agent still thaws a
paused job within one sample period, exits on SIGTERM within seconds, and keeps the
batch in its spool until a good service takes it; every broken answer is a ReportError
that backs off."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import wait_for
from test_agent_recovery import frozen
from test_agent_report import SECRET, _Service, make_report

from nodeagent.report import ReportSender
from nodeagent.testing import BUSY

GIB = 2**30
INTERVAL_S = 1.0  # the agent's sample period in these tests
SLACK_S = 2.0  # a loaded 2-core machine: a process may wait this long for a CPU
AGENT = [sys.executable, "-m", "nodeagent.cli", "run", "--config"]


class BadService:
    """Takes each connection, reads the request, then answers per `answer`: "silent"
    (never), "drip" (an endless header, one byte a second), or these bytes and close."""

    def __init__(self, answer: str | bytes) -> None:
        self.answer = answer
        self.accepted = 0
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            _read_request(conn)
            if self.answer == "silent":
                self.stop.wait()
            elif self.answer == "drip":
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not self.stop.wait(1.0):
                    conn.sendall(b"a")
            else:
                conn.sendall(self.answer)  # type: ignore[arg-type]
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


BROKEN = {
    "incomplete": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
    "bad_status_line": b"SPAM\r\n\r\n",
    "disconnected": b"",
    "too_long": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * (1 << 20),
    "too_long_announced": b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n",
    "drip": "drip",
    "silent": "silent",
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_every_broken_answer_is_a_report_error_that_backs_off(tmp_path, kind):
    """IncompleteRead, BadStatusLine, RemoteDisconnected, a too-long answer, a dripped
    one, none: each backs off like an unreachable service, its batch kept, and the POST
    never lasts past its deadline (`timeout`, in all, not per receive)."""
    bad = BadService(BROKEN[kind])
    try:
        sender = ReportSender(bad.url, "gpu01", SECRET, tmp_path / "spool", timeout=2)
        delivered: list[int] = []
        flush = threading.Thread(
            target=lambda: delivered.append(sender.send([make_report(1)], now=100.0)),
            daemon=True,
        )
        flush.start()
        flush.join(2 + SLACK_S)
        assert not flush.is_alive(), "the POST outlived its deadline"
        assert delivered == [0]
        assert sender.failures == 1 and sender.next_try == 105.0
        assert len(sender.pending()) == 1
    finally:
        bad.close()


def _agent_toml(tmp: Path, url: str, gpu: str) -> Path:
    secret = tmp / "secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    classes = tmp / "classes.toml"
    classes.write_text('opportunistic_qos = ["scavenger"]\n')
    cfg = tmp / "agent.toml"
    cfg.write_text(
        f'node_name = "n1"\ninterval_s = {INTERVAL_S}\nstate_file = "{tmp / "state.json"}"\n'
        f'classes_file = "{classes}"\n'
        f"{gpu}\n"
        f'[energy]\nrapl_root = "{tmp / "no-rapl"}"\n'
        "[exporter]\nenabled = false\n"
        f'[report]\nenabled = true\nservice_url = "{url}"\nsecret_file = "{secret}"\n'
        # a report every sample; 60 s per receive: today's agent waits on each one
        f'interval_s = 1\ntimeout_s = 60\nspool_dir = "{tmp / "spool"}"\n'
        '[jobs]\nsource = "environ"\n'
        "[colocation.tuning]\nmemory_high = 0.5\n"
    )
    return cfg


def _stop(agent: subprocess.Popen) -> None:
    if agent.poll() is None:
        agent.kill()
        agent.wait(10)


@pytest.mark.parametrize("kind", ["drip", "silent"])
def test_a_paused_job_is_thawed_within_one_sample_period_while_a_post_hangs(tmp_path, cg, kind):
    g_pid = cg.start(811, BUSY)
    o_pid = cg.start(812, BUSY, env={"SLURM_JOB_QOS": "scavenger"})
    placement = tmp_path / "placement.json"
    placement.write_text(
        json.dumps(
            [
                {"pid": g_pid, "gpu": 0, "memory_bytes": 50 * GIB, "sm_util": 0.9},
                {"pid": o_pid, "gpu": 0, "memory_bytes": 10 * GIB, "sm_util": 0.3},
            ]
        )
    )
    gpu = (
        f'[gpu]\nbackend = "simulated"\nsimulated_count = 1\n'
        f'simulated_processes_file = "{placement}"'
    )
    bad = BadService(kind)
    cfg = _agent_toml(tmp_path, bad.url, gpu)
    log = open(tmp_path / "agent.log", "ab")
    agent = subprocess.Popen([*AGENT, str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: frozen(cg, 812), timeout=30, what="the opportunistic job frozen")
        wait_for(lambda: bad.accepted, timeout=30, what="a report POST in flight")
        guaranteed = next(p for p in cg.procs if p.pid == g_pid)
        guaranteed.kill()  # the guaranteed job leaves: its memory pressure with it
        guaranteed.wait()
        left = time.monotonic()
        wait_for(lambda: not frozen(cg, 812), timeout=15, interval=0.05, what="the thaw")
        assert time.monotonic() - left < INTERVAL_S + SLACK_S
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(10)
        finally:
            _stop(agent)
            bad.close()


@pytest.mark.parametrize("kind", ["drip", "silent"])
def test_sigterm_ends_the_agent_mid_post_and_the_batch_waits_for_a_good_service(tmp_path, kind):
    spool = tmp_path / "spool"
    ReportSender("http://unused", "n1", SECRET, spool).enqueue([make_report(42, node="n1")])
    bad = BadService(kind)
    cfg = _agent_toml(tmp_path, bad.url, '[gpu]\nbackend = "none"')
    log = open(tmp_path / "agent.log", "ab")
    agent = subprocess.Popen([*AGENT, str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: bad.accepted, timeout=30, what="the spooled batch's POST in flight")
        time.sleep(INTERVAL_S)  # a sample or two while the POST hangs
        asked = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(INTERVAL_S + 5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent ignored SIGTERM for {INTERVAL_S + 5} s")
        assert agent.returncode == 0
        assert time.monotonic() - asked < INTERVAL_S + SLACK_S
    finally:
        _stop(agent)
        bad.close()
    # kept: the POST never finished (the agent may have spooled batches of its own since:
    # of jobs that tests beside this one run on the machine)
    assert len([b for b in spool.glob("batch-*.json") if b'"job_id":42,' in b.read_bytes()]) == 1

    good = _Service(jobs={42})
    try:
        cfg.write_text(cfg.read_text().replace(bad.url, good.url))
        res = subprocess.run([*AGENT, str(cfg), "--once"], capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert [r.job_id for r in good.received] == [42]
        assert not [b for b in spool.glob("batch-*.json") if b'"job_id":42,' in b.read_bytes()]
    finally:
        good.close()
