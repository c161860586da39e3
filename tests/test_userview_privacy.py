"""What the user view reveals: `user_view = "auto"` follows Slurm's PrivateData, and the
anonymous view shows no user, no job name and no history-group label that carries one,
anywhere (queue, page, one job; the group column and the service's reason), on a real
socket from a store a real service pass wrote. Escape sequences in a job name reach the
terminal escaped through `queue/explain --server`."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from test_userview import get, ready

from slurm_ext.cli.inspect import explain, queue
from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.service.listener import ListenerLimits
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.metrics import ServiceMetrics, serve_http
from slurm_ext.slurm.client import parse_private_data
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient
from slurm_ext.userview.http import UserView
from slurm_ext.userview.privacy import HIDDEN_GROUP, anonymous, neutral_group, view_mode

TITLE = "\x1b]0;title\x07"  # sets a terminal's title; Slurm accepts it in a job name
SECRET_NAME = "secret-project"


@pytest.mark.parametrize(
    "setting, private, mode",
    [
        ("auto", frozenset(), "full"),
        ("auto", frozenset({"usage", "events"}), "full"),
        ("auto", frozenset({"jobs"}), "anonymous"),
        ("auto", frozenset({"users"}), "anonymous"),
        ("auto", frozenset({"accounts"}), "anonymous"),
        ("auto", None, "anonymous"),  # Slurm could not say: hide
        ("full", frozenset({"jobs", "users"}), "full"),  # the admin's explicit choice
        ("anonymous", frozenset(), "anonymous"),
        ("off", frozenset(), "off"),
    ],
)
def test_the_view_mode_follows_private_data_unless_set(setting, private, mode):
    assert view_mode(setting, private) == mode


def test_private_data_as_scontrol_prints_it():
    assert parse_private_data(" jobs,usage,users") == {"jobs", "usage", "users"}
    assert parse_private_data("none") == parse_private_data("") == frozenset()
    assert parse_private_data("(null)") == frozenset()


@pytest.mark.parametrize(
    "group, kept",
    [
        ("pooled", True),
        ("1 GPU class", True),
        ("3-4 GPUs class", True),
        ("gpus=2 GPUs", True),
        ("pooled, truncated at its time limit (7200 GPU-s)", True),
        ("user=alice,name=train", False),
        ("user=alice", False),
        ("name=pooled", False),
        ("account=physics,gpus=1 GPU", False),
        ("gpus=1 GPU,user=alice", False),
        ("pooled, its GPU-times tighter than user=alice,gpus=1 GPU's", False),
        ("1 GPU class\x1b", False),
    ],
)
def test_only_group_labels_that_name_no_one_are_kept(group, kept):
    assert neutral_group(group) == (group if kept else HIDDEN_GROUP)


def test_anonymous_rows_hide_the_label_in_the_reason_too():
    row = {
        "user": "alice",
        "group": "user=alice,name=train",
        "policy_reason": "queue 1 (...); gittins 0.2 from user=alice,name=train (5 completed jobs)",
    }
    out = anonymous(row)
    assert out["user"] == "" and out["group"] == HIDDEN_GROUP
    assert (
        out["policy_reason"] == f"queue 1 (...); gittins 0.2 from {HIDDEN_GROUP} (5 completed jobs)"
    )
    pooled = {
        "user": "bob",
        "group": "pooled",
        "policy_reason": "gittins 0.1 from pooled (9 completed jobs)",
    }
    assert anonymous(pooled) == pooled | {"user": ""}


def named_store(path) -> Service:
    """One pass over jobs whose index comes from their user+name history: job 1
    (alice's `SECRET_NAME`), job 2 (bob's job named TITLE), job 3 (carol's, no history)."""
    now = time.time()
    history = [
        (900 + i, 60.0 * (1 + i), 60.0, now - 100 + i, "alice", SECRET_NAME, "", 3600.0)
        for i in range(5)
    ]
    history += [
        (950 + i, 90.0 * (1 + i), 90.0, now - 100 + i, "bob", TITLE, "", 3600.0) for i in range(5)
    ]
    store = Store(path)
    store.save_jobs([], history)
    jobs = [
        Job(1, user="alice", name=SECRET_NAME, state=JobState.PENDING, gpus=1, submit_time=now - 60, reason="Priority"),
        Job(2, user="bob", name=TITLE, state=JobState.PENDING, gpus=1, submit_time=now - 50, reason="Resources"),
        Job(3, user="carol", name="x", state=JobState.PENDING, gpus=1, submit_time=now - 40, reason="Priority"),
    ]  # fmt: skip
    cfg = ServiceConfig(store=str(path), port=0, history_source="store")
    svc = Service(cfg, ReplayClient(jobs, [Node("n1", gpus=1, gpus_alloc=1)]), store)
    svc.run_pass()
    return svc


@pytest.fixture
def named(tmp_path, request):
    path = tmp_path / "service.db"
    svc = named_store(path)
    view = UserView(path, request.param, 0.05)
    ready(view)
    limits = ListenerLimits(header_timeout_s=2.0)
    server = serve_http(
        "127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, limits=limits, view=view
    )
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    view.close()
    svc.store.close()


@pytest.mark.parametrize("named", ["full"], indirect=True)
def test_the_full_view_shows_users_and_their_groups(named):
    doc = json.loads(get(named, "/v1/queue")[2])
    groups = {r["job_id"]: r["group"] for r in doc["jobs"]}
    assert groups[1] == f"user=alice,name={SECRET_NAME}" and groups[2] == f"user=bob,name={TITLE}"
    assert {r["user"] for r in doc["jobs"]} == {"alice", "bob", "carol"}


@pytest.mark.parametrize("named", ["anonymous"], indirect=True)
def test_the_anonymous_view_shows_no_user_no_job_name_and_no_label_that_names_one(named):
    for path in ("/v1/queue", "/", "/v1/jobs/1", "/v1/jobs/2", "/v1/jobs/3"):
        code, _, body = get(named, path)
        assert code == 200, path
        text = body.decode()
        for hidden in ("alice", "bob", "carol", SECRET_NAME, ",name=", "user=", "\x1b", "]0;ti"):
            assert hidden not in text, (path, hidden)
    doc = json.loads(get(named, "/v1/queue")[2])
    assert doc["privacy"] == "anonymous"
    rows = {r["job_id"]: r for r in doc["jobs"]}
    assert rows[1]["group"] == rows[2]["group"] == HIDDEN_GROUP
    assert f"from {HIDDEN_GROUP} (5 completed jobs)" in rows[1]["policy_reason"]
    assert rows[3]["group"] == "pooled"  # names no one: kept
    page = get(named, "/")[2].decode()
    assert "User names, job names and accounts are hidden on this site" in page


@pytest.mark.parametrize("named", ["full"], indirect=True)
def test_a_job_name_with_escape_sequences_reaches_the_terminal_escaped(named):
    runner = CliRunner()
    res = runner.invoke(explain, ["--server", named, "2"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "from user=bob,name=\\x1b]0;title\\x07 (5 completed jobs)" in res.output
    res = runner.invoke(queue, ["--server", named])
    assert res.exit_code == 0 and "\x1b" not in res.output and "\x07" not in res.output
    res = runner.invoke(explain, ["--server", named, "2", "--json"])
    assert "\x1b" not in res.output and "name=\\u001b]0;title\\u0007" in res.output
