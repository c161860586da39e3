"""Reports failing for a while are logged once, then at a bounded rate, and their end is
logged; the agent's snapshot and metrics say how long and how much waits. A real
loopback HTTP service that answers 503 until told otherwise."""

from __future__ import annotations

import logging

import pytest
from conftest import wait_for
from prometheus_client import generate_latest
from test_agent_report import SECRET, _Service, make_report

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.exporter import make_registry
from nodeagent.gpu import SimulatedGpuReader
from nodeagent.report import ReportSender


@pytest.fixture
def service():
    s = _Service()
    yield s
    s.close()


def _records(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "nodeagent.report" and r.levelno == level
    ]


def test_failing_reports_logged_once_then_bounded_then_recovery(service, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="nodeagent.report")
    service.fail_with = 503
    sender = ReportSender(
        service.url,
        "gpu01",
        SECRET,
        tmp_path / "spool",
        backoff_base_s=10,
        backoff_max_s=10,
        warn_after_s=60,
        warn_every_s=300,
    )
    sender.send([make_report(1)], now=0.0)
    for t in range(10, 1000, 10):  # a retry every 10 s for ~17 minutes
        sender.flush(now=float(t))
    assert sender.failures == 100
    warnings = _records(caplog, logging.WARNING)
    assert len(warnings) == 1 and "503" in warnings[0]  # the first failure only
    errors = _records(caplog, logging.ERROR)
    # after 60 s, then at most every 300 s: at 60, 360, 660, 960
    assert len(errors) == 4, errors
    assert "have failed for 60 s (7 attempts, 1 batches spooled" in errors[0]
    assert "failed for 960 s" in errors[-1] and "503" in errors[-1]
    assert len(_records(caplog, logging.DEBUG)) == 99  # every later retry, quietly
    assert sender.failing_for(now=1000.0) == pytest.approx(1000.0)

    service.fail_with = None
    caplog.clear()
    assert sender.flush(now=1000.0) == 1
    assert _records(caplog, logging.WARNING) == [
        f"reports delivered again to {service.url} after 1000 s of failures"
    ]
    assert sender.failing_for(now=1001.0) == 0.0
    service.fail_with = 503  # a new outage is announced afresh
    sender.send([make_report(2)], now=1010.0)
    assert len(_records(caplog, logging.WARNING)) == 2


def test_agent_snapshot_and_metrics_show_the_backlog(service, tmp_path):
    service.fail_with = 503
    cfg = AgentConfig(node_name="gpu01", state_file="", proc_root=str(tmp_path / "proc"))
    (tmp_path / "proc").mkdir()  # no processes: other jobs on this machine stay out of it
    cfg.jobs.source = "environ"
    cfg.interval_s = 0.1  # the sender's thread looks at the spool this often
    cfg.report.interval_s = 0.0  # a report at every step
    sender = ReportSender(service.url, "gpu01", SECRET, tmp_path / "spool", backoff_base_s=0.01)
    agent = Agent(cfg, SimulatedGpuReader(1), None, sender=sender)
    sender.enqueue([make_report(1)])  # no job on the node: one batch by hand
    wait_for(lambda: sender.failures, what="the sender's thread to try and fail")
    agent.step()
    snap = agent.snapshot
    assert snap.report_failing_s is not None and snap.report_failing_s > 0
    assert snap.report_backlog == 1
    text = generate_latest(make_registry(agent)).decode()
    assert "slurm_ext_agent_report_backlog_batches 1.0" in text
    service.fail_with = None
    # the sender's thread delivers the spooled batch past the back-off, the loop goes on
    wait_for(lambda: not sender.pending(), what="the spooled batch delivered")
    agent.step()  # which the next snapshot shows
    assert agent.snapshot.report_failing_s == 0.0 and agent.snapshot.report_backlog == 0
    assert (
        "slurm_ext_agent_report_failing_seconds 0.0"
        in generate_latest(make_registry(agent)).decode()
    )
    agent.reports.close(1.0)


def test_no_report_metrics_without_reports(tmp_path):
    cfg = AgentConfig(node_name="gpu01", state_file="")
    cfg.jobs.source = "environ"
    agent = Agent(cfg, SimulatedGpuReader(1), None)
    agent.step()
    assert agent.snapshot.report_failing_s is None
    assert "report_backlog" not in generate_latest(make_registry(agent)).decode()
