"""The read-only user view: what a pass keeps for it, what the listener answers (on a real
loopback socket, from a real SQLite store a real service pass wrote), its privacy
setting, its refresh rule, a client that never reads, and `queue/explain --server`."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sqlite3
import threading
import time
from dataclasses import replace

import pytest
from click.testing import CliRunner

from slurm_ext.cli.inspect import explain, queue
from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.service.listener import ListenerLimits
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.metrics import ServiceMetrics, serve_http
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient
from slurm_ext.userview.http import UserView
from slurm_ext.userview.rows import free_gpus


def snapshot() -> tuple[list[Job], list[Node]]:
    now = (
        time.time()
    )  # per call: a module-level clock is minutes old by the time a full run gets here
    jobs = [
        Job(1, user="alice", state=JobState.RUNNING, gpus=4, submit_time=now - 3600,
            start_time=now - 3000, nodes=("n1",), reason="None"),
        Job(2, user="<b>bob</b>", state=JobState.PENDING, gpus=4, submit_time=now - 600,
            reason="Resources"),
        Job(3, user="carol", state=JobState.PENDING, gpus=1, submit_time=now - 60,
            reason="Priority"),
    ]  # fmt: skip
    return jobs, [Node("n1", gpus=4, gpus_alloc=4), Node("n2", gpus=4, gpus_alloc=2)]


def one_pass(path, jobs, nodes) -> Service:
    cfg = ServiceConfig(store=str(path), port=0, history_source="store")
    store = Store(cfg.store)
    svc = Service(cfg, ReplayClient(jobs, nodes), store)
    svc.run_pass()
    return svc


@pytest.fixture
def served(tmp_path, request):
    """(base URL, UserView, listener) over a store one pass wrote; param: privacy."""
    with serving(tmp_path / "service.db", *snapshot(), getattr(request, "param", "full")) as out:
        yield out


@contextlib.contextmanager
def serving(path, jobs, nodes, privacy: str = "full"):
    """The service's listener with a UserView over a store one pass over `jobs` wrote."""
    svc = one_pass(path, jobs, nodes)
    view = UserView(
        path,
        privacy,
        0.05,
        rate=1000.0,
        burst=1000,
        client_rate=1000.0,
        client_burst=1000,
    )
    ready(view)
    limits = ListenerLimits(
        header_timeout_s=2.0, body_timeout_s=2.0, small_body=1024, max_per_client=100
    )
    server = serve_http(
        "127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, limits=limits, view=view
    )
    server.svc = svc  # the service whose passes write the store
    try:
        yield f"http://127.0.0.1:{server.server_port}", view, server
    finally:
        server.shutdown()
        view.close()
        svc.store.close()


def ready(view: UserView) -> None:
    """Wait for the view's first build (its refresher thread starts at once)."""
    deadline = time.monotonic() + 10
    while view.privacy != "off" and view._built is None and time.monotonic() < deadline:
        time.sleep(0.02)


def get(base: str, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path)
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def test_a_pass_keeps_group_slurm_reason_and_nodes_and_rewrites_nodes_only_on_change(tmp_path):
    path = tmp_path / "s.db"
    jobs, nodes = snapshot()
    svc = one_pass(path, jobs, nodes)
    d = svc.store.decisions()
    assert (d[2].slurm_reason, d[3].slurm_reason) == ("Resources", "Priority")
    assert [(n.name, n.gpus_alloc) for n in svc.store.nodes()] == [("n1", 4), ("n2", 2)]
    other = sqlite3.connect(path)  # another process marks the saved row
    other.execute("UPDATE node_gpus SET state = 'MARK' WHERE name = 'n2'")
    other.commit()
    svc.run_pass()  # same nodes: not written again
    assert {n.name: n.state for n in svc.store.nodes()}["n2"] == "MARK"
    svc.client.nodes_snapshot = [nodes[0], replace(nodes[1], gpus_alloc=3)]
    svc.run_pass()
    assert {n.name: (n.state, n.gpus_alloc) for n in svc.store.nodes()}["n2"] == ("IDLE", 3)
    other.close()
    svc.store.close()


def test_fragmentation_counts_free_gpus_the_widest_waiting_job_cannot_use():
    nodes = [
        Node("a", gpus=8, gpus_alloc=5),  # 3 free: too few for 4
        Node("b", gpus=8, gpus_alloc=4),  # 4 free: fits
        Node("c", gpus=4, gpus_alloc=0),  # idle 4-GPU node: takes its share of an 8-GPU job
        Node("d", gpus=8, gpus_alloc=6, state="DRAIN"),  # not schedulable: not free
    ]
    f = free_gpus(nodes, [1, 4, 2])
    assert (f.free, f.widest_waiting, f.stranded) == (11, 4, 3)
    assert f.fragmentation == pytest.approx(3 / 11)
    wide = free_gpus(nodes, [8])
    assert (wide.widest_waiting, wide.stranded) == (8, 7)  # a and b; c has all its 4
    assert free_gpus(nodes, []).stranded == 0  # nothing waits: nothing is stranded


def test_queue_job_and_page_answers(served):
    import json

    base, view, _ = served
    code, headers, body = get(base, "/v1/queue")
    assert code == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert [r["job_id"] for r in doc["jobs"]] == [1, 2, 3]  # as the pass ranked them
    assert [r["rank"] for r in doc["jobs"]] == [0, 1, 2]
    assert doc["jobs"][1]["reason"] == "Resources" and doc["jobs"][1]["wait_s"] >= 600
    assert doc["jobs"][2]["value_set"] is not None and doc["jobs"][2]["run_s"] is None
    running = doc["jobs"][0]  # waited 600 s before its start, has run 3000 s
    assert running["wait_s"] == 600.0 and 3000 <= running["run_s"] < 3060
    assert (running["state_code"], running["reason"]) == ("R", "")  # not Slurm's "None"
    assert doc["free_gpus"] == {"free": 2, "widest_waiting": 4, "stranded": 2, "fragmentation": 1.0}
    code, _, body = get(base, "/v1/jobs/2")
    info = json.loads(body)
    assert code == 200 and info["slurm_reason"] == "Resources" and info["rank"] == 1
    assert info["user"] == "<b>bob</b>" and "queue 0" in info["policy_reason"]
    code, headers, page = get(base, "/")
    text = page.decode()
    assert code == 200 and headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in headers["content-security-policy"]
    assert 'id="job-2"' in text and "<b>Resources</b>" in text
    assert "&lt;b&gt;bob&lt;/b&gt;" in text and "<b>bob</b>" not in text  # escaped
    assert "<script" not in text and "http" not in text.split("<body>")[1]  # self-contained
    assert view.reads == 1  # three answers, one store read


def test_bad_paths_methods_and_ids(served):
    base, _, _ = served
    assert get(base, "/v1/jobs/999")[0] == 404
    assert b"not in the service's store" in get(base, "/v1/jobs/999")[2]
    for bad in ("/v1/jobs/2a", "/v1/jobs/", "/v1/jobs/-1", "/v1/jobs/1234567890123"):
        assert get(base, bad)[0] == 400, bad
    code, headers, _ = get(base, "/v1/queue", method="POST")
    assert code == 405 and headers["allow"] == "GET"
    assert get(base, "/v1/queue", method="DELETE")[0] == 405
    assert get(base, "/v1/other")[0] == 404
    assert get(base, "/v1/queue?x=1")[0] == 200  # the query is ignored


@pytest.mark.parametrize("served", ["anonymous"], indirect=True)
def test_anonymous_view_hides_every_user_name(served):
    base, _, _ = served
    for path in ("/v1/queue", "/", "/v1/jobs/1", "/v1/jobs/2", "/v1/jobs/3"):
        code, _, body = get(base, path)
        assert code == 200, path
        for name in (b"alice", b"bob", b"carol"):
            assert name not in body, (path, name)
    assert b'"job_id": 3' in get(base, "/v1/queue")[2]  # the jobs themselves are there


@pytest.mark.parametrize("served", ["off"], indirect=True)
def test_view_off_answers_404_and_reads_nothing(served):
    base, view, _ = served
    for path in ("/", "/v1/queue", "/v1/jobs/1"):
        code, _, body = get(base, path)
        assert code == 404 and b"user view is off" in body
    assert view.reads == 0


def test_requests_never_read_the_store_and_a_pass_is_read_once(served):
    import json

    base, view, server = served
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda: codes.append(get(base, "/v1/queue")[0])) for _ in range(40)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    time.sleep(0.3)  # the refresher looked several times meanwhile
    assert codes == [200] * 40 and view.reads == 1 and view.attempts > 3
    jobs, nodes = snapshot()
    server.svc.client.jobs_snapshot = jobs[:2]  # job 3 left the queue
    server.svc.run_pass()
    deadline = time.monotonic() + 10
    while view.reads < 2 and time.monotonic() < deadline:  # read once after the pass
        time.sleep(0.02)
    time.sleep(0.3)
    rows = json.loads(get(base, "/v1/queue")[2])["jobs"]
    assert [r["job_id"] for r in rows] == [1, 2] and view.reads == 2


def test_view_answers_are_rate_limited_for_all_clients_together(tmp_path):
    path = tmp_path / "service.db"
    svc = one_pass(path, *snapshot())
    view = UserView(path, rate=2.0, burst=5)
    ready(view)
    server = serve_http("127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, view=view)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        t0 = time.monotonic()
        answers = [get(base, "/v1/jobs/1") for _ in range(20)]
        elapsed = time.monotonic() - t0
        codes = [a[0] for a in answers]
        assert codes[:5] == [200] * 5 and 429 in codes
        assert codes.count(200) <= 5 + 2.0 * elapsed + 1  # the burst, then the rate
        refused = next(a for a in answers if a[0] == 429)
        assert refused[1]["retry-after"] == "1" and b"retry later" in refused[2]
        assert get(base, "/metrics")[0] == 200  # the rest of the listener is not limited
        time.sleep(1.0)  # tokens come back
        assert get(base, "/v1/queue")[0] == 200
    finally:
        server.shutdown()
        view.close()
        svc.store.close()


def test_an_unreadable_store_answers_503_and_is_not_retried_per_request(tmp_path, caplog):
    view = UserView(tmp_path / "missing.db", refresh_s=60.0)  # one look in this test
    server = serve_http("127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, view=view)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        deadline = time.monotonic() + 10
        while view.attempts < 1 and time.monotonic() < deadline:  # the refresher's start
            time.sleep(0.01)
        for _ in range(5):
            code, _, body = get(base, "/v1/queue")
            assert code == 503 and b"retry later" in body
        assert view.attempts == 1  # the refresher's first look; requests read nothing
        assert caplog.text.count("user view: cannot read the store") == 1
    finally:
        server.shutdown()
        view.close()


def test_a_client_that_never_reads_a_large_answer_is_cut_off(tmp_path):
    path = tmp_path / "big.db"
    jobs = [
        Job(i, user=f"user{i % 50}" + "x" * 2000, state=JobState.PENDING, gpus=1 + i % 4,
            submit_time=time.time() - i, reason="Priority")
        for i in range(1, 4001)
    ]  # fmt: skip
    svc = one_pass(path, jobs, [Node("n1", gpus=4)])
    view = UserView(path)
    ready(view)
    limits = ListenerLimits(header_timeout_s=1.0, body_timeout_s=1.5)
    server = serve_http(
        "127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, limits=limits, view=view
    )
    try:
        size = len(view._built.queue)
        assert size > 8_000_000  # far more than the kernel socket buffers hold (4 MiB)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.server_port))
        sock.sendall(b"GET /v1/queue HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(3.0)  # never read while the listener's send deadline passes
        got = b""
        sock.settimeout(5)
        while chunk := sock.recv(1 << 16):
            got += chunk
        sock.close()
        assert got.startswith(b"HTTP/1.1 200") and len(got) < size  # cut, then closed
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.open_connections == 0
        assert get(f"http://127.0.0.1:{server.server_port}", "/v1/jobs/7")[0] == 200
    finally:
        server.shutdown()
        view.close()
        svc.store.close()


def test_queue_and_explain_with_server(served):
    import json

    base, _, _ = served
    runner = CliRunner()
    res = runner.invoke(queue, ["--server", base])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:3] == ["RANK", "JOBID", "USER"]
    assert [int(line.split()[1]) for line in lines[1:4]] == [1, 2, 3]
    assert "Resources" in lines[2] and lines[2].split()[-1] == "Resources"
    assert lines[-1].startswith("last pass")
    doc = json.loads(runner.invoke(queue, ["--server", base + "/", "--json"]).output)
    assert [r["job_id"] for r in doc["jobs"]] == [1, 2, 3]
    res = runner.invoke(explain, ["--server", base, "2"])
    assert res.exit_code == 0, res.output
    assert "job 2: PENDING (Slurm reason: Resources, priority -)" in res.output
    assert "rank 1 in queue 0" in res.output and "waiting for" in res.output
    res = runner.invoke(explain, ["--server", base, "999"])
    assert res.exit_code == 1 and "job 999 is not in the service's store" in res.output
    res = runner.invoke(queue, ["--server", base, "--all"])
    assert res.exit_code == 2 and "--all needs the store and Slurm here" in res.output
    res = runner.invoke(queue, ["--server", "ftp://example"])  # a failure to read: 2
    assert res.exit_code == 2 and "give http://HOST:PORT" in res.output
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    res = runner.invoke(queue, ["--server", f"http://127.0.0.1:{port}"])
    assert res.exit_code == 2 and "cannot reach the service" in res.output


def _partitioned() -> tuple[list[Job], list[Node]]:
    """The snapshot with job 1 in "gpu", job 2 pending in "gpu,debug", job 3 in "debug"."""
    jobs, nodes = snapshot()
    parts = {1: "gpu", 2: "gpu,debug", 3: "debug"}
    return [replace(j, partition=parts[j.job_id]) for j in jobs], nodes


def _ids(res) -> list[int]:
    assert res.exit_code == 0, res.output
    return [r["job_id"] for r in json.loads(res.output)["jobs"]]


def test_queue_filters_by_user_and_partition_locally_and_from_the_server(tmp_path, monkeypatch):
    import slurm_ext.cli.inspect as inspect_mod

    jobs, nodes = _partitioned()
    config = tmp_path / "service.toml"
    config.write_text(f'store = "{tmp_path / "service.db"}"\nhistory_source = "store"\n')
    # the local path asks Slurm for what it shows now: the snapshot the pass read
    monkeypatch.setattr(inspect_mod, "service_client", lambda cfg: ReplayClient(jobs, nodes))
    runner = CliRunner()
    with serving(tmp_path / "service.db", jobs, nodes) as (base, _, _):
        for where in (["--server", base], ["--config", str(config)]):
            assert _ids(runner.invoke(queue, [*where, "--json"])) == [1, 2, 3]
            assert _ids(runner.invoke(queue, [*where, "--json", "-u", "carol"])) == [3]
            both = ["--json", "--user", "alice,carol"]
            assert _ids(runner.invoke(queue, [*where, *both])) == [1, 3]
            assert _ids(runner.invoke(queue, [*where, "--json", "-p", "gpu"])) == [1, 2]
            assert _ids(runner.invoke(queue, [*where, "--json", "-p", "debug"])) == [2, 3]
            mixed = ["--json", "-p", "debug", "-u", "alice"]
            assert _ids(runner.invoke(queue, [*where, *mixed])) == []
            res = runner.invoke(queue, [*where, "-p", "debug"])  # the table too
            assert res.exit_code == 0, res.output
            assert [ln.split()[1] for ln in res.output.splitlines()[1:3]] == ["2", "3"]
            assert len(res.output.splitlines()) == 4  # header, two jobs, last pass


def test_queue_me_is_the_callers_jobs(tmp_path, monkeypatch):
    import slurm_ext.cli.inspect as inspect_mod

    jobs, nodes = _partitioned()
    with serving(tmp_path / "service.db", jobs, nodes) as (base, _, _):
        monkeypatch.setattr(inspect_mod, "_caller", lambda: "carol")
        assert _ids(CliRunner().invoke(queue, ["--server", base, "--json", "--me"])) == [3]
        monkeypatch.setattr(inspect_mod, "_caller", lambda: "dave")
        assert _ids(CliRunner().invoke(queue, ["--server", base, "--json", "--me"])) == []


def test_user_filters_on_an_anonymous_view_say_why_they_cannot(tmp_path):
    with serving(tmp_path / "service.db", *snapshot(), "anonymous") as (base, _, _):
        res = CliRunner().invoke(queue, ["--server", base, "-u", "carol"])
        assert res.exit_code == 2 and "shows no user names" in res.output
        assert _ids(CliRunner().invoke(queue, ["--server", base, "--json"])) == [1, 2, 3]


def test_the_server_defaults_to_the_environment_then_client_toml(tmp_path):
    client_toml = tmp_path / "client.toml"
    with serving(tmp_path / "service.db", *snapshot()) as (base, _, _):
        absent = "http://127.0.0.1:1"  # nothing listens: asking it fails with exit 2
        env = {"SLURM_EXT_SERVER": base, "SLURM_EXT_CLIENT_CONFIG": str(client_toml)}
        client_toml.write_text(f'server = "{absent}"\n')
        runner = CliRunner(env=env)
        assert _ids(runner.invoke(queue, ["--json"])) == [1, 2, 3]  # the environment wins
        res = runner.invoke(explain, ["2"])
        assert res.exit_code == 0 and "job 2: PENDING" in res.output
        res = runner.invoke(queue, ["--server", absent])  # an explicit --server wins
        assert res.exit_code == 2 and "cannot reach the service" in res.output
        client_toml.write_text(f'server = "{base}"\n')
        runner = CliRunner(env={**env, "SLURM_EXT_SERVER": None})
        assert _ids(runner.invoke(queue, ["--json", "--me"])) == []  # no test user's jobs
        assert _ids(runner.invoke(queue, ["--json"])) == [1, 2, 3]
        # --config (the service's own config) reads its store here, whatever the defaults
        config = tmp_path / "service.toml"
        config.write_text(f'store = "{tmp_path / "absent.db"}"\n')
        res = runner.invoke(queue, ["--config", str(config)])
        assert res.exit_code == 2 and "absent.db: store not found here" in res.output
        for bad, key in (('server = 3\n', "server"), ('server = "ftp://x"\n', "server"),
                         ('serve = "http://x:1"\n', "serve")):  # fmt: skip
            client_toml.write_text(bad)
            res = runner.invoke(queue, [])
            assert res.exit_code == 2, res.output
            assert f"config error: {client_toml}: {key}:" in res.output, res.output
