"""`queue/explain --server` against hostile servers on 127.0.0.1: each answer that once
ended in a traceback (RecursionError, IncompleteRead, BadStatusLine, KeyError,
TypeError, OverflowError on inf, ValueError on NaN), a server that drips or never
answers, a body cut short, wrong types, huge numbers, deep nesting. Every one must end
in one error line and exit status 2, within the deadline; a well-formed answer with
escape sequences in its strings is printed with them escaped."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner

from slurm_ext.cli.inspect import explain, queue
from slurm_ext.userview import client as view_client
from slurm_ext.userview.client import ViewError, fetch_job, fetch_queue

ROW = {
    "job_id": 2, "user": "bob", "partition": "gpu", "state": "PENDING", "state_code": "PD",
    "gpus": 4, "rank": 1, "queue": 0, "gittins": 0.5, "group": "pooled", "group_samples": 9,
    "attained_gpu_s": 0.0, "wait_s": 600.0, "run_s": None, "value_set": 7, "mode": None,
    "slurm_priority": None, "reason": "Resources", "policy_reason": "queue 0",
    "promoted": False,
}  # fmt: skip
LAST = {"id": 3, "started_at": time.time(), "duration_s": 0.1, "ranked": 1, "writes": 1,
        "errors": 0, "dry_run": 0}  # fmt: skip
INFO = {
    "job_id": 2, "user": "bob", "gpus": 4, "slurm_state": "PENDING",
    "slurm_reason": "Resources", "slurm_priority": None, "managed": True, "pinned": False,
    "held": None, "rank": 1, "queue": 0, "gittins": 0.5, "group": "pooled",
    "group_samples": 9, "promoted": False, "policy_reason": "queue 0", "value_set": 7,
    "mode": None, "placement": ["n1"], "attained_gpu_s": 0.0, "wait_s": 600.0,
    "last_run_s": 0.0, "current_run_s": None, "as_of": time.time(),
}  # fmt: skip


def queue_doc(**row: object) -> bytes:
    return json.dumps({"as_of": 1.0, "jobs": [ROW | row], "last_pass": LAST}).encode()


def answer(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    ).encode() + body


def raw_head(extra: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\n{extra}\r\n".encode()


Behaviour = Callable[[socket.socket], None]


def sends(data: bytes, close: bool = True) -> Behaviour:
    def run(conn: socket.socket) -> None:
        conn.sendall(data)
        if not close:
            time.sleep(30)

    return run


def drips(data: bytes, every_s: float = 0.2) -> Behaviour:
    def run(conn: socket.socket) -> None:
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            time.sleep(every_s)

    return run


class HostileServer:
    """Answers every connection on 127.0.0.1 with `behaviour`, after reading the head."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            got = b""
            while b"\r\n\r\n" not in got and (chunk := conn.recv(4096)):
                got += chunk
            try:
                self.behaviour(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stop = True
        self.sock.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Behaviour], HostileServer]]:
    servers: list[HostileServer] = []

    def start(behaviour: Behaviour) -> HostileServer:
        servers.append(HostileServer(behaviour))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


DEEP = b"[" * 100_000 + b"]" * 100_000
CASES = {
    # once: http.client.BadStatusLine
    "bad status line": (sends(b"garbage\r\n\r\n"), "not an HTTP answer"),
    # once: http.client.IncompleteRead, or a cut body taken as the whole one
    "body cut short": (
        sends(answer(queue_doc())[:-20]),
        "peer closed connection without sending complete message body",
    ),
    "no Content-Length": (
        sends(raw_head("Connection: close\r\n") + queue_doc()),
        "does not state its Content-Length",
    ),
    "chunked": (
        sends(raw_head("Transfer-Encoding: chunked\r\n") + b"2\r\n{}\r\n0\r\n\r\n"),
        "does not state its Content-Length",
    ),
    "announces 1 TB": (
        sends(raw_head("Content-Length: 1000000000000\r\n") + b"{", close=False),
        "larger than",
    ),
    "closes at once": (sends(b""), "without"),
    # once: RecursionError
    "deep nesting": (sends(answer(DEEP)), "nested too deep"),
    # once: ValueError on NaN, OverflowError on inf (duration of an infinite wait)
    "NaN": (sends(answer(queue_doc().replace(b"600.0", b"NaN"))), "NaN is not a number"),
    "Infinity": (sends(answer(queue_doc().replace(b"600.0", b"Infinity"))), "Infinity"),
    "1e999": (sends(answer(queue_doc().replace(b"600.0", b"1e999"))), "beyond a float"),
    "huge number": (sends(answer(queue_doc(wait_s=1e300))), "'wait_s' is not a finite"),
    "huge int": (sends(answer(queue_doc(job_id=10**30))), "'job_id' is not a whole number"),
    "5000 digits": (
        sends(answer(queue_doc().replace(b'"gpus": 4', b'"gpus": ' + b"9" * 5000))),
        "not the service's JSON view",
    ),
    # once: KeyError
    "missing field": (sends(answer(b'{"jobs": [{"job_id": 1}]}')), "no 'user'"),
    "no jobs": (sends(answer(b'{"as_of": 1}')), "'jobs' is not a list"),
    # once: TypeError
    "wrong type": (sends(answer(queue_doc(job_id="2"))), "'job_id' is not a whole number"),
    "bool for int": (sends(answer(queue_doc(gpus=True))), "'gpus' is not a whole number"),
    "jobs not a list": (sends(answer(b'{"jobs": "x"}')), "'jobs' is not a list"),
    "not an object": (sends(answer(b"[]")), "not an object"),
    "long string": (sends(answer(queue_doc(user="x" * 20_000))), "'user' is not a string"),
    "last_pass wrong": (
        sends(answer(queue_doc().replace(b'"ranked": 1', b'"ranked": "1"'))),
        "'ranked' is not a whole number",
    ),
    "not UTF-8": (sends(answer(b'{"jobs": "\x80\x81"}')), "not the service's JSON view"),
    "not JSON": (sends(answer(b"<html>")), "not the service's JSON view"),
    "error status": (sends(answer(b"\x1b]0;pwned\x07 down\n", "500 Oops")), "HTTP 500"),
    # once: hung for minutes
    "drips": (drips(answer(queue_doc()), 0.3), "no complete answer within 1 s"),
    "never answers": (sends(b"", close=False), "no complete answer within 1 s"),
    "drips its head": (drips(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 100, 0.05), "within 1 s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_answer_is_one_error_line_and_status_2(hostile, monkeypatch, case):
    behaviour, message = CASES[case]
    server = hostile(behaviour)
    t0 = time.monotonic()
    with pytest.raises(ViewError) as caught:
        fetch_queue(server.url, deadline_s=1.0)
    assert time.monotonic() - t0 < 2.0
    assert message in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setattr(view_client, "DEADLINE_S", 1.0)
    t0 = time.monotonic()
    res = CliRunner().invoke(queue, ["--server", server.url])
    assert time.monotonic() - t0 < 2.0
    assert isinstance(res.exception, SystemExit) and res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("slurm-ext: "), res.output
    assert "Traceback" not in res.output and "\x1b" not in res.output and "\x07" not in res.output


def test_explain_checks_its_answer_too(hostile):
    for body, message in (
        (json.dumps(INFO | {"job_id": 7}).encode(), "about job 7, not 2"),
        (json.dumps(INFO | {"placement": "n1"}).encode(), "'placement' is not a list"),
        (json.dumps(INFO | {"current_run_s": 1e300}).encode(), "'current_run_s'"),
        (json.dumps({k: v for k, v in INFO.items() if k != "managed"}).encode(), "'managed'"),
    ):
        server = hostile(sends(answer(body)))
        res = CliRunner().invoke(explain, ["--server", server.url, "2"])
        assert res.exit_code == 2 and message in res.output, res.output
        assert res.output.count("\n") == 1
    server = hostile(sends(answer(b"job 2 is not in the service's store\n", "404 Not Found")))
    res = CliRunner().invoke(explain, ["--server", server.url, "2"])
    assert res.exit_code == 1 and "job 2 is not in the service's store" in res.output


def test_a_well_formed_answer_is_read_whole_and_only_its_checked_fields_kept(hostile):
    doc = json.loads(queue_doc())
    doc["jobs"][0]["extra"] = {"anything": [1, 2]}
    server = hostile(sends(answer(json.dumps(doc).encode())))
    got = fetch_queue(server.url, deadline_s=2.0)
    assert got["jobs"] == [ROW] and got["last_pass"] == LAST
    server = hostile(sends(answer(json.dumps(INFO).encode())))
    assert fetch_job(server.url, 2, deadline_s=2.0) == INFO


def test_escape_sequences_from_a_server_are_printed_escaped(hostile):
    title = "\x1b]0;title\x07"
    doc = queue_doc(user=title, reason="Res\x9bources\u202e", group=f"user=a,name={title}")
    server = hostile(sends(answer(doc)))
    res = CliRunner().invoke(queue, ["--server", server.url])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output and "\x9b" not in res.output
    assert "\u202e" not in res.output and "\\u202e" in res.output
    assert "\\x1b]0;ti" in res.output  # the USER column is 10 wide
    res = CliRunner().invoke(queue, ["--server", server.url, "--json"])
    assert "\x1b" not in res.output and "\\u001b]0;title\\u0007" in res.output  # json.dumps
    info = INFO | {"policy_reason": f"gittins 0.5 from user=a,name={title} (9 completed jobs)"}
    server = hostile(sends(answer(json.dumps(info | {"slurm_reason": title}).encode())))
    res = CliRunner().invoke(explain, ["--server", server.url, "2"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "from user=a,name=\\x1b]0;title\\x07 (9 completed jobs)" in res.output
    assert "(Slurm reason: \\x1b]0;title\\x07," in res.output


def test_the_deadline_holds_in_a_tls_handshake_too(hostile):
    server = hostile(sends(b"", close=False))  # takes the connection, never says a word
    t0 = time.monotonic()
    with pytest.raises(ViewError, match="no complete answer within 1 s"):
        fetch_queue(server.url.replace("http:", "https:"), deadline_s=1.0)
    assert time.monotonic() - t0 < 2.0
