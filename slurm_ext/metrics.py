"""The service's Prometheus metrics and its one HTTP listener (metrics + agent reports).

One loopback port serves `GET /metrics` and `POST /v1/reports`; reports must carry a
valid HMAC signature of the body made with the shared secret, or they are refused.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from nodeagent.report import REPORTS_PATH, SIGNATURE_HEADER, JobReport, decode_reports, verify
from slurm_ext.model import Decision

log = logging.getLogger("slurm_ext.service")
MAX_BODY = 8 * 1024 * 1024


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.pass_seconds = Histogram(
            "slurm_ext_pass_duration_seconds",
            "Duration of one service pass",
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.jobs_ranked = Gauge(
            "slurm_ext_jobs_ranked", "Jobs ranked in the last pass", registry=r
        )
        self.writes = Counter(
            "slurm_ext_writes_total",
            "Writes to Slurm (priority, site factor, placement, requeue)",
            registry=r,
        )
        self.errors = Counter(
            "slurm_ext_errors_total", "Failed Slurm calls and failed passes", registry=r
        )
        self.requeues = Counter(
            "slurm_ext_requeues_total", "Jobs requeued by the preemption rule", registry=r
        )
        self.queue_jobs = Gauge(
            "slurm_ext_queue_jobs", "Jobs per policy queue level", ["queue"], registry=r
        )
        self.promoted = Gauge(
            "slurm_ext_promoted_jobs", "Jobs lifted by the starvation guard", registry=r
        )
        self.reports = Counter(
            "slurm_ext_reports_received_total", "Job reports accepted from node agents", registry=r
        )
        self.reports_refused = Counter(
            "slurm_ext_reports_refused_total", "Report posts refused", ["reason"], registry=r
        )
        self.last_pass = Gauge(
            "slurm_ext_last_pass_timestamp_seconds", "When the last pass finished", registry=r
        )

    def observe_pass(self, res, decisions: Sequence[Decision]) -> None:
        self.pass_seconds.observe(res.duration_s)
        self.jobs_ranked.set(res.ranked)
        self.writes.inc(res.writes)
        self.errors.inc(res.errors)
        self.requeues.inc(len(res.requeued))
        counts = Tally(d.queue for d in decisions)
        self.queue_jobs.clear()
        for q, n in counts.items():
            self.queue_jobs.labels(queue=str(q)).set(n)
        self.promoted.set(sum(1 for d in decisions if d.promoted))
        self.last_pass.set_to_current_time()


def serve_http(
    host: str,
    port: int,
    metrics: ServiceMetrics,
    secret: bytes | None,
    on_reports: Callable[[list[JobReport]], int],
) -> ThreadingHTTPServer:
    """Start the listener in a daemon thread; returns the server (call .shutdown())."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args) -> None:  # route to logging, quietly
            log.debug("http: " + fmt, *args)

        def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self._reply(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, b"not found\n")

        def do_POST(self) -> None:
            if self.path.split("?")[0] != REPORTS_PATH:
                self._reply(404, b"not found\n")
                return
            if secret is None:
                metrics.reports_refused.labels(reason="no_secret").inc()
                self._reply(503, b"reports disabled: service has no report_secret_file\n")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                metrics.reports_refused.labels(reason="size").inc()
                self._reply(413 if length > MAX_BODY else 411, b"bad content length\n")
                return
            body = self.rfile.read(length)
            if not verify(body, secret, self.headers.get(SIGNATURE_HEADER)):
                metrics.reports_refused.labels(reason="signature").inc()
                log.warning(
                    "refused reports from %s: bad or missing signature", self.client_address[0]
                )
                self._reply(401, b"bad signature\n")
                return
            try:
                reports = decode_reports(body)
            except ValueError as exc:
                metrics.reports_refused.labels(reason="malformed").inc()
                self._reply(400, f"malformed reports: {exc}\n".encode())
                return
            try:
                n = on_reports(reports)
            except Exception as exc:  # the store failed: tell the agent to retry later
                log.error("could not store %d reports: %s", len(reports), exc)
                metrics.reports_refused.labels(reason="store").inc()
                self._reply(503, b"store unavailable, retry later\n")
                return
            metrics.reports.inc(len(reports))
            self._reply(200, f'{{"accepted": {n}}}\n'.encode(), "application/json")

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="slurm-ext-http", daemon=True).start()
    return server
