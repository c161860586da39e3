"""The service's Prometheus metrics, and `serve_http` to start its one HTTP listener.

One port serves `GET /metrics` and `POST /v1/reports` (slurm_ext/service/listener.py);
reports must carry a valid HMAC signature of the body made with the shared secret.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slurm_ext.core.model import Decision
from slurm_ext.core.reports import JobReport
from slurm_ext.service.listener import JobNodes, ListenerLimits, ReportListener


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
        # Two kinds of failure, counted apart: a Slurm call that failed inside a pass
        # that went on (retried next pass), and a pass that failed as a whole (Slurm
        # unreachable, the store, a bug; the service backs off).
        self.slurm_call_errors = Counter(
            "slurm_ext_slurm_call_errors_total",
            "Slurm calls that failed within a pass (retried next pass)",
            registry=r,
        )
        self.failed_passes = Counter(
            "slurm_ext_failed_passes_total",
            "Passes that failed as a whole (the service backs off and retries)",
            registry=r,
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
        self.order_inversions = Gauge(
            "slurm_ext_order_inversions_ratio",
            "Share of adjacent pending jobs Slurm's priority orders against the service's"
            " (Slurm's other factors outweigh the written values' spacing)",
            registry=r,
        )
        self.last_pass = Gauge(
            "slurm_ext_last_pass_timestamp_seconds", "When the last pass finished", registry=r
        )

    def observe_pass(self, res, decisions: Sequence[Decision]) -> None:
        self.pass_seconds.observe(res.duration_s)
        self.jobs_ranked.set(res.ranked)
        self.writes.inc(res.writes)
        self.slurm_call_errors.inc(res.errors)
        self.requeues.inc(len(res.requeued))
        counts = Tally(d.queue for d in decisions)
        self.queue_jobs.clear()
        for q, n in counts.items():
            self.queue_jobs.labels(queue=str(q)).set(n)
        self.promoted.set(sum(1 for d in decisions if d.promoted))
        inverted, compared = res.inversions
        self.order_inversions.set(inverted / compared if compared else 0.0)
        self.last_pass.set_to_current_time()


def serve_http(
    host: str,
    port: int,
    metrics: ServiceMetrics,
    secret: bytes | None,
    on_reports: Callable[[list[JobReport]], int],
    job_nodes: JobNodes | None = None,
    limits: ListenerLimits | None = None,
    view=None,
) -> ReportListener:
    """Start the listener on its own thread; returns it (call .shutdown()).
    `job_nodes`: where Slurm ran each job, so a node cannot report for another's jobs.
    `view`: the read-only user view (slurm_ext.userview.http.UserView), or None."""
    return ReportListener(host, port, metrics, secret, on_reports, job_nodes, limits, view=view)
