"""The service's HTTP listener under hostile input, on a real loopback socket with a real
SQLite store: stalled clients, bodies announced but never sent, malformed signatures,
non-finite values, out-of-range ids, stale `sent_at`. Signed reports keep being accepted."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest
from test_agent_report import SECRET, make_report

from nodeagent.report import ReportSender
from slurm_ext.core.reports import (
    NODE_HEADER,
    SIGNATURE_HEADER,
    encode_reports,
    node_key,
    sign,
    verify,
)
from slurm_ext.service.listener import ListenerLimits
from slurm_ext.service.metrics import ServiceMetrics, serve_http
from slurm_ext.store.db import Store

# one client address may hold all of them here: the per-client cap has its own tests
LIMITS = ListenerLimits(
    header_timeout_s=2.0, body_timeout_s=3.0, max_connections=200, max_per_client=200
)


@pytest.fixture
def listener(tmp_path):
    store_path = tmp_path / "service.db"
    Store(store_path).close()

    def save(reports):
        store = Store(store_path)
        try:
            return store.add_reports(reports)
        finally:
            store.close()

    metrics = ServiceMetrics()
    server = serve_http("127.0.0.1", 0, metrics, SECRET, save, limits=LIMITS)
    server.store_path = store_path
    server.metrics_obj = metrics
    yield server
    server.shutdown()


def stored(server) -> list:
    store = Store(server.store_path, readonly=True)
    try:
        return store.reports()
    finally:
        store.close()


def post(server, body: bytes, signature: str | None, timeout: float = 5.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    conn.request("POST", "/v1/reports", body=body, headers=headers)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def signed(body: bytes) -> tuple[bytes, str]:
    return body, sign(body, SECRET)


def refused(server, reason: str) -> float:
    return server.metrics_obj.reports_refused.labels(reason=reason)._value.get()


def test_verify_never_raises_on_a_hostile_signature():
    body = b"{}"
    for sig in ["é" * 64, "x" * 64, sign(body, SECRET) + "0", "", "\udcff" * 64]:
        assert verify(body, SECRET, sig) is False
    assert verify(body, SECRET, sign(body, SECRET).upper()) is True


def test_non_ascii_signature_header_is_refused_with_401(listener):
    body = encode_reports("gpu01", [make_report(5)])
    assert post(listener, body, "é" * 64)[0] == 401
    assert stored(listener) == []


def test_body_is_not_read_without_a_signature_of_the_right_shape(listener):
    """Content-Length announced, no body sent: refused at once, not after a body wait."""
    with socket.create_connection(("127.0.0.1", listener.server_address[1]), timeout=5) as s:
        s.sendall(
            b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            + SIGNATURE_HEADER.encode()
            + b": not-hex\r\n\r\n"
        )
        t0 = time.monotonic()
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 401"), answer
        assert time.monotonic() - t0 < 1.0


def test_oversized_body_refused_before_reading(listener):
    with socket.create_connection(("127.0.0.1", listener.server_address[1]), timeout=5) as s:
        s.sendall(
            b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % (LIMITS.max_body + 1)
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 413")


def _raw(server, data: bytes, pieces: int = 1, then_close: bool = False) -> bytes:
    """The listener's answer to `data` sent as is (in `pieces` writes, then the sending
    side closed if `then_close`), up to EOF."""
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as s:
        step = -(-len(data) // pieces)
        for at in range(0, len(data), step):
            s.sendall(data[at : at + step])
            time.sleep(0.01 if pieces > 1 else 0)
        if then_close:
            s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        return got


@pytest.mark.parametrize(
    "head, status",
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n" % (b"a" * 20_000), b"431"),
        (b"GET /metrics HTTP/1.1\r\n\r\n", b"400"),  # HTTP/1.1 without Host
        (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", b"400"),
        (b"GET /metrics\r\nHost: x\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", b"400"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", b"400"),
    ],
)
def test_a_malformed_or_oversized_head_is_refused(listener, head, status):
    answer = _raw(listener, head)
    assert answer.startswith(b"HTTP/1.1 " + status)
    assert b"Bad Name" not in answer and b"aaaa" not in answer  # the client is not quoted
    assert refused(listener, "headers") == 1


def test_a_report_must_state_its_length(listener):
    body = encode_reports("gpu01", [make_report(4)])
    chunked = (
        b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"%s: %s\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
        % (SIGNATURE_HEADER.encode(), sign(body, SECRET).encode(), len(body), body)
    )
    assert _raw(listener, chunked).startswith(b"HTTP/1.1 411")
    assert refused(listener, "size") == 1
    assert stored(listener) == []


def test_a_request_in_small_pieces_is_read_whole(listener):
    body = encode_reports("gpu01", [make_report(6)])
    request = (
        b"POST /v1/reports?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: %s\r\n\r\n%s"
        % (len(body), SIGNATURE_HEADER.encode(), sign(body, SECRET).encode(), body)
    )
    assert _raw(listener, request, pieces=20).startswith(b"HTTP/1.1 200")
    assert [r.job_id for r in stored(listener)] == [6]


def test_a_client_that_closes_mid_head_or_mid_body_gets_nothing_stored(listener):
    assert _raw(listener, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n", then_close=True) == b""
    assert refused(listener, "headers") == 1
    body = encode_reports("gpu01", [make_report(7)])
    cut = b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: %s\r\n\r\n%s" % (
        len(body),
        SIGNATURE_HEADER.encode(),
        sign(body, SECRET).encode(),
        body[:-1],
    )
    assert _raw(listener, cut, then_close=True) == b""
    assert refused(listener, "incomplete") == 1
    assert stored(listener) == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("gpu_energy_j", "NaN"),
        ("gpu_seconds", "Infinity"),
        ("period_start", "-Infinity"),
        ("job_id", str(2**63)),
        ("job_id", "0"),
        ("gpu_mem_peak_bytes", str(2**70)),
        # finite, but more than one job on one node can reach: two such reports made
        # `energy` print "infh GPU-time"
        ("gpu_seconds", "1e308"),
        ("gpu_energy_j", "1e300"),
        ("cpu_energy_j", "1e300"),
        ("cpu_cores_used", "1e9"),
        ("samples", str(10**15)),
        ("gpu_mem_peak_bytes", str(2**50)),
    ],
)
def test_non_finite_and_out_of_range_values_are_400_not_stored(listener, field, value):
    doc = json.loads(encode_reports("gpu01", [make_report(9)]))
    text = json.dumps(doc).replace(
        f'"{field}": {json.dumps(doc["reports"][0][field])}', f'"{field}": {value}'
    )
    assert value in text
    status, answer = post(listener, *signed(text.encode()))
    assert status == 400, answer  # refused for good: the agent drops it, its spool moves on
    assert field.encode() in answer
    assert stored(listener) == []


def test_stale_or_future_sent_at_is_refused(listener):
    for sent_at in (0.0, time.time() - 3600, time.time() + 3600):
        body = encode_reports("gpu01", [make_report(11)], sent_at=sent_at)
        assert post(listener, *signed(body))[0] == 403
    assert stored(listener) == []
    body = encode_reports("gpu01", [make_report(11)])
    assert post(listener, *signed(body))[0] == 200
    assert [r.job_id for r in stored(listener)] == [11]


def test_a_batch_spooled_long_ago_is_stamped_when_sent(listener, tmp_path):
    url = f"http://127.0.0.1:{listener.server_address[1]}"
    sender = ReportSender(url, "gpu01", SECRET, tmp_path / "spool", timeout=5)
    sender.enqueue([make_report(12)], now=time.time() - 86400)  # spooled a day ago
    assert sender.flush(now=0.0) == 1
    assert [r.job_id for r in stored(listener)] == [12]


def _stall_headers(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n")  # never ends the head
    return s


def _stall_body(port: int, length: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
        f"{SIGNATURE_HEADER}: {'0' * 64}\r\n\r\n"
    )
    s.sendall(head.encode() + b"{" * 1000)  # a start, then nothing
    return s


def test_stalled_clients_hold_no_threads_and_signed_reports_still_go_through(listener):
    port = listener.server_address[1]
    before = threading.active_count()
    stalled = [_stall_headers(port) for _ in range(100)]
    stalled += [_stall_body(port, LIMITS.max_body) for _ in range(20)]
    try:
        time.sleep(0.5)
        assert threading.active_count() - before <= LIMITS.workers
        body = encode_reports("gpu01", [make_report(21)])
        t0 = time.monotonic()
        assert post(listener, *signed(body), timeout=5)[0] == 200
        assert time.monotonic() - t0 < 1.0
        assert [r.job_id for r in stored(listener)] == [21]
        # only max_large_bodies large bodies are read at once: the others were told 503
        assert refused(listener, "busy") == 20 - LIMITS.max_large_bodies
        # every stalled client is cut off by its deadline
        deadline = time.monotonic() + LIMITS.body_timeout_s + 3
        for s in stalled:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            while s.recv(4096):  # EOF (or a short answer, then EOF)
                pass
        assert listener.open_connections == 0
    finally:
        for s in stalled:
            s.close()


def test_connections_beyond_the_cap_get_503_and_are_closed(tmp_path):
    metrics = ServiceMetrics()
    limits = ListenerLimits(max_connections=5, header_timeout_s=5.0)
    server = serve_http("127.0.0.1", 0, metrics, SECRET, lambda r: len(r), limits=limits)
    port = server.server_address[1]
    held = [_stall_headers(port) for _ in range(5)]
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            assert s.recv(4096).startswith(b"HTTP/1.1 503")
    finally:
        for s in held:
            s.close()
        server.shutdown()


def test_metrics_still_served(listener):
    conn = http.client.HTTPConnection("127.0.0.1", listener.server_address[1], timeout=5)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200
    assert b"slurm_ext_reports_received_total" in resp.read()


def _post_as(server, body: bytes, key: bytes, node: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    headers = {SIGNATURE_HEADER: sign(body, key), NODE_HEADER: node}
    conn.request("POST", "/v1/reports", body=body, headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_a_per_node_key_signs_for_its_own_node_only(listener, tmp_path):
    key1 = node_key(SECRET, "gpu01")
    own = encode_reports("gpu01", [make_report(31, node="gpu01")])
    other = encode_reports("gpu02", [make_report(32, node="gpu02")])
    assert _post_as(listener, other, key1, "gpu01") == 401  # names another node in the body
    assert _post_as(listener, other, key1, "gpu02") == 401  # gpu01's key is not gpu02's
    assert _post_as(listener, own, key1, "gpu01") == 200
    assert [r.job_id for r in stored(listener)] == [31]
    # an agent given only its node key delivers through its spool as before
    url = f"http://127.0.0.1:{listener.server_address[1]}"
    sender = ReportSender(url, "gpu01", key1, tmp_path / "spool", timeout=5)
    assert sender.send([make_report(33, node="gpu01")], now=0.0) == 1
    assert sorted(r.job_id for r in stored(listener)) == [31, 33]


def test_report_key_command_derives_the_nodes_key(tmp_path):
    from click.testing import CliRunner

    from nodeagent.cli import main

    master = tmp_path / "report.secret"
    master.write_bytes(SECRET + b"\n")
    master.chmod(0o600)
    res = CliRunner().invoke(main, ["report-key", "gpu01", "--master", str(master)])
    assert res.exit_code == 0, res.output
    assert res.output.strip().encode() == node_key(SECRET, "gpu01") != node_key(SECRET, "gpu02")
    master.chmod(0o644)
    res = CliRunner().invoke(main, ["report-key", "gpu01", "--master", str(master)])
    assert res.exit_code == 2 and "chmod 600" in res.output


# ---- one client cannot deny everyone ----------------------------------------------------


def _stall_from(port: int, source: str) -> socket.socket:
    """A connection from `source` (any 127.x.y.z reaches the loopback listener) that
    never ends its head."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.sendall(b"GET /v1/queue HTTP/1.1\r\nHost: x\r\n")
    return s


def _signed_post(port: int, source: str, job: int, node: str = "gpu01") -> int:
    body = encode_reports(node, [make_report(job, node=node)])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    conn.request(
        "POST",
        "/v1/reports",
        body=body,
        headers={SIGNATURE_HEADER: sign(body, SECRET), NODE_HEADER: node},
    )
    status = conn.getresponse().status
    conn.close()
    return status


def _get_from(port: int, source: str, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    conn.request("GET", path)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def test_client_key_is_the_address_or_the_ipv6_64():
    from slurm_ext.service.listener import client_key

    assert client_key(("10.1.2.3", 5000)) == "10.1.2.3"
    assert client_key(("2001:db8:1:2:aa::1", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("2001:db8:1:2:bb::9", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("::ffff:10.1.2.3", 5000, 0, 0)) == "10.1.2.3"
    assert client_key(None) == "?"


def test_one_address_holds_at_most_its_share_of_connections(tmp_path):
    metrics = ServiceMetrics()
    limits = ListenerLimits(max_per_client=4, header_timeout_s=5.0)
    server = serve_http("127.0.0.1", 0, metrics, SECRET, lambda r: len(r), limits=limits)
    port = server.server_address[1]
    held = [_stall_from(port, "127.0.0.1") for _ in range(4)]
    try:
        time.sleep(0.3)
        extra = _stall_from(port, "127.0.0.1")  # its fifth: refused at once
        assert extra.recv(4096).startswith(b"HTTP/1.1 503")
        extra.close()
        assert metrics.reports_refused.labels(reason="client")._value.get() == 1
        assert _get_from(port, "127.0.0.2", "/metrics")[0] == 200  # another address: served
        assert _signed_post(port, "127.0.0.3", 41) == 200
    finally:
        for s in held:
            s.close()
        server.shutdown()


def test_the_last_connections_are_kept_for_node_reports(tmp_path):
    """Many addresses fill the general share: a view request is refused, a report with a
    node name and a signature's shape still gets a connection, and a head that does not
    come at once in the reserved share is cut after reserve_header_timeout_s."""
    metrics = ServiceMetrics()
    limits = ListenerLimits(
        max_connections=12, report_share=0.25, max_per_client=4, header_timeout_s=10.0,
        reserve_header_timeout_s=0.5,
    )  # fmt: skip
    server = serve_http("127.0.0.1", 0, metrics, SECRET, lambda r: len(r), limits=limits)
    port = server.server_address[1]
    held = [_stall_from(port, f"127.0.1.{i // 3 + 1}") for i in range(9)]  # 12 x 0.75
    try:
        time.sleep(0.3)
        assert server.open_connections == 9
        code, body = _get_from(port, "127.0.2.1", "/metrics")
        assert code == 503 and b"kept for node reports" in body
        assert _signed_post(port, "127.0.2.2", 42) == 200
        late = _stall_from(port, "127.0.2.3")  # a stalled head in the reserved share
        t0 = time.monotonic()
        late.settimeout(5)
        assert late.recv(4096).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - t0 < 2.0
        late.close()
    finally:
        for s in held:
            s.close()
        server.shutdown()


def test_under_a_flood_from_one_address_reports_and_the_view_are_served(tmp_path):
    """One address keeps 128 sockets reconnecting (the listener's whole cap); reports
    from a node and view requests from another address are all served meanwhile."""
    from test_userview import one_pass, ready, snapshot

    from slurm_ext.userview.http import UserView

    store_path = tmp_path / "service.db"
    svc = one_pass(store_path, *snapshot())
    view = UserView(store_path, refresh_s=0.05)
    ready(view)
    metrics = ServiceMetrics()
    limits = ListenerLimits(header_timeout_s=2.0)
    server = serve_http("127.0.0.1", 0, metrics, SECRET, lambda r: len(r), limits=limits, view=view)
    port = server.server_address[1]
    stop = threading.Event()
    flood_sockets: list[socket.socket] = []

    def flood() -> None:
        while not stop.is_set():
            while len(flood_sockets) < limits.max_connections and not stop.is_set():
                try:
                    flood_sockets.append(_stall_from(port, "127.0.0.1"))
                except OSError:
                    break
            for s in flood_sockets[: len(flood_sockets) // 2]:  # reconnect half of them
                s.close()
            del flood_sockets[: len(flood_sockets) // 2]

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    try:
        time.sleep(0.5)
        reports = [_signed_post(port, "127.0.0.2", 50 + i) for i in range(20)]
        views = [_get_from(port, "127.0.0.3", "/v1/queue")[0] for _ in range(10)]
        assert reports == [200] * 20 and views == [200] * 10
        assert metrics.reports_refused.labels(reason="client")._value.get() > 0
    finally:
        stop.set()
        flooder.join(10)
        for s in flood_sockets:
            s.close()
        server.shutdown()
        view.close()
        svc.store.close()


def test_view_answers_are_rate_limited_per_client_address(tmp_path):
    from test_userview import one_pass, ready, snapshot

    from slurm_ext.userview.http import UserView

    store_path = tmp_path / "service.db"
    svc = one_pass(store_path, *snapshot())
    view = UserView(store_path, rate=100.0, burst=100, client_rate=1.0, client_burst=3)
    ready(view)
    server = serve_http("127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, view=view)
    port = server.server_address[1]
    try:
        mine = [_get_from(port, "127.0.0.1", "/v1/jobs/1")[0] for _ in range(6)]
        assert mine[:3] == [200] * 3 and mine.count(429) >= 2
        assert [_get_from(port, "127.0.0.2", "/v1/jobs/1")[0] for _ in range(3)] == [200] * 3
    finally:
        server.shutdown()
        view.close()
        svc.store.close()
