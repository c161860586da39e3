"""Prometheus metrics built from the agent's latest snapshot at scrape time.

A custom collector (not long-lived Gauges) so a job's series vanish when the job leaves;
it reads `agent.snapshot`, one frozen sample, so a scrape needs no lock. The job label
is `jobid`, not `job`: Prometheus sets `job` on every target itself and would rename
ours to `exported_job`. GPU labels are `gpu`, `uuid` (as jobstats) and `model_name`
(dcgm-exporter's `modelName` in snake case, which `promtool check metrics` asks for).

`/metrics` passes `promtool check metrics`. With `jobstats_compat` the same port also
serves `/jobstats`: the `nvidia_gpu_*` families of Princeton's jobstats GPU exporter,
kept under their own names (`nvidia_gpu_jobId` included, which promtool rejects as
camelCase, and which jobstats queries by that name).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from nodeagent.snapshot import AgentSnapshot

if TYPE_CHECKING:
    from nodeagent.agent import Agent

P = "slurm_ext_"
JOBSTATS_PATH = "/jobstats"


class AgentCollector:
    """The agent's own families (`/metrics`)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        s = self.agent.snapshot
        yield from _gpu_families(s)
        yield from _job_families(s)
        yield from _node_families(s)
        yield from _agent_families(s)


def _gpu_families(s: AgentSnapshot) -> Iterator[Metric]:
    gl = ["gpu", "uuid", "model_name"]
    util = GaugeMetricFamily(P + "gpu_utilization_ratio", "GPU busy fraction (0..1)", labels=gl)
    mem = GaugeMetricFamily(P + "gpu_memory_used_bytes", "GPU memory in use", labels=gl)
    memt = GaugeMetricFamily(P + "gpu_memory_total_bytes", "GPU memory size", labels=gl)
    power = GaugeMetricFamily(P + "gpu_power_watts", "GPU power draw", labels=gl)
    energy = CounterMetricFamily(
        P + "gpu_energy_joules", "GPU energy since the agent's state began", labels=gl
    )
    for g in s.gpus:
        lv = [g.label, g.uuid, g.name]
        if g.util is not None:
            util.add_metric(lv, g.util)
        if g.memory_used_bytes is not None:
            mem.add_metric(lv, g.memory_used_bytes)
        if g.memory_total_bytes is not None:
            memt.add_metric(lv, g.memory_total_bytes)
        if g.power_w is not None:
            power.add_metric(lv, g.power_w)
        if g.uuid in s.gpu_energy_total:
            energy.add_metric(lv, s.gpu_energy_total[g.uuid])
    ol = ["gpu", "uuid", "user"]
    outside = GaugeMetricFamily(
        P + "gpu_processes_outside_jobs",
        "Processes on the GPU in no Slurm job, by owner",
        labels=ol,
    )
    outside_mem = GaugeMetricFamily(
        P + "gpu_memory_outside_jobs_bytes",
        "GPU memory held by processes in no Slurm job, by owner",
        labels=ol,
    )
    counts: dict[tuple[str, str, str], list[int]] = {}
    for p in s.outside_jobs():
        c = counts.setdefault((p.gpu, p.uuid, p.user or "unknown"), [0, 0])
        c[0] += 1
        c[1] += p.gpu_memory_bytes or 0
    for key, (n, used) in sorted(counts.items()):
        outside.add_metric(list(key), n)
        outside_mem.add_metric(list(key), used)
    yield from (util, mem, memt, power, energy, outside, outside_mem)


def _job_families(s: AgentSnapshot) -> Iterator[Metric]:
    jl = ["jobid", "gpu", "uuid"]
    jutil = GaugeMetricFamily(P + "job_gpu_utilization_ratio", "Job's share of GPU time", labels=jl)
    jmem = GaugeMetricFamily(P + "job_gpu_memory_used_bytes", "Job's GPU memory", labels=jl)
    for u in s.job_gpu:
        lv = [str(u.job_id), u.gpu.label, u.gpu.uuid]
        if u.util is not None:
            jutil.add_metric(lv, u.util)
        jmem.add_metric(lv, u.memory_bytes)
    j = ["jobid"]
    jgpue = CounterMetricFamily(
        P + "job_gpu_energy_joules", "GPU energy attributed to the job", labels=j
    )
    jcpue = CounterMetricFamily(
        P + "job_cpu_energy_joules", "CPU (RAPL) energy attributed to the job", labels=j
    )
    jgpus = CounterMetricFamily(P + "job_gpu_seconds", "GPU-seconds held by the job", labels=j)
    jcpus = CounterMetricFamily(P + "job_cpu_seconds", "CPU seconds used by the job", labels=j)
    jrss = GaugeMetricFamily(
        P + "job_memory_rss_bytes", "Summed RSS of the job's processes", labels=j
    )
    jpaused = GaugeMetricFamily(
        P + "job_paused", "1 while the agent holds the job paused", labels=["jobid", "class"]
    )
    for job, v in s.jobs.items():
        lv = [str(job)]
        jgpue.add_metric(lv, v.report.gpu_energy_j)
        jcpue.add_metric(lv, v.report.cpu_energy_j)
        jgpus.add_metric(lv, v.report.gpu_seconds)
        jcpus.add_metric(lv, v.cpu_s)
        jpaused.add_metric([str(job), v.klass], 1.0 if v.paused else 0.0)
        if v.pids:
            jrss.add_metric(lv, v.rss_bytes)
    yield from (jutil, jmem, jgpue, jcpue, jgpus, jcpus, jrss, jpaused)


def _node_families(s: AgentSnapshot) -> Iterator[Metric]:
    cpue = CounterMetricFamily(P + "node_cpu_energy_joules", "CPU package energy (RAPL)")
    cpue.add_metric([], s.cpu_energy_total)
    yield cpue
    if s.host is None:
        return
    h = s.host
    cpus = GaugeMetricFamily(P + "node_cpus", "Logical CPUs of the node")
    cpus.add_metric([], h.cpu_count)
    memt = GaugeMetricFamily(P + "node_memory_total_bytes", "Memory of the node")
    memt.add_metric([], h.memory_total_bytes)
    mema = GaugeMetricFamily(
        P + "node_memory_available_bytes", "Memory available to new work (the kernel's estimate)"
    )
    mema.add_metric([], h.memory_available_bytes)
    yield from (cpus, memt, mema)
    if h.cpu_utilization is not None:
        util = GaugeMetricFamily(
            P + "node_cpu_utilization_ratio", "Busy fraction of all CPUs since the last sample"
        )
        util.add_metric([], h.cpu_utilization)
        yield util


def _agent_families(s: AgentSnapshot) -> Iterator[Metric]:
    acts = CounterMetricFamily(
        P + "colocation_actions", "Pauses and resumes by the agent", labels=["action", "reason"]
    )
    for (kind, code), n in sorted(s.action_counts.items()):
        acts.add_metric([kind, code], n)
    verdicts = CounterMetricFamily(
        P + "eaco_verdicts",
        "EaCO admission verdicts, by inputs: learnt from history or configured",
        labels=["verdict", "inputs"],
    )
    for (verdict, inputs), n in sorted(s.eaco_verdicts.items()):
        verdicts.add_metric([verdict, inputs], n)
    errs = CounterMetricFamily(
        P + "agent_errors",
        "Errors by source (gpu, slurm, state, report, step, thaw, unvouched)",
        labels=["source"],
    )
    for source, n in sorted(s.error_counts.items()):
        errs.add_metric([source], n)
    samples = CounterMetricFamily(P + "agent_samples", "Samples taken")
    samples.add_metric([], s.samples_total)
    dur = GaugeMetricFamily(P + "agent_sample_cpu_seconds", "CPU time of the last sample")
    dur.add_metric([], s.last_duration_s)
    yield from (acts, verdicts, errs, samples, dur)
    if s.report_failing_s is not None:
        failing = GaugeMetricFamily(
            P + "agent_report_failing_seconds",
            "How long report deliveries have been failing (0 while they succeed)",
        )
        failing.add_metric([], s.report_failing_s)
        backlog = GaugeMetricFamily(
            P + "agent_report_backlog_batches", "Report batches waiting in the spool"
        )
        backlog.add_metric([], s.report_backlog or 0)
        yield from (failing, backlog)


class JobstatsCollector:
    """The `nvidia_gpu_*` families of jobstats' GPU exporter (`/jobstats`)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        s = self.agent.snapshot
        labels = ["minor_number", "name", "uuid"]
        duty = GaugeMetricFamily(
            "nvidia_gpu_duty_cycle", "GPU utilization (percent)", labels=labels
        )
        used = GaugeMetricFamily(
            "nvidia_gpu_memory_used_bytes", "Memory used by the GPU device in bytes", labels=labels
        )
        total = GaugeMetricFamily(
            "nvidia_gpu_memory_total_bytes",
            "Total memory of the GPU device in bytes",
            labels=labels,
        )
        mw = GaugeMetricFamily(
            "nvidia_gpu_power_usage_milliwatts",
            "Power usage of the GPU device in milliwatts",
            labels=labels,
        )
        jobid = GaugeMetricFamily("nvidia_gpu_jobId", "Lowest job id using this GPU", labels=labels)
        owners: dict[str, int] = {}
        for u in s.job_gpu:
            owners[u.gpu.uuid] = min(owners.get(u.gpu.uuid, u.job_id), u.job_id)
        for g in s.gpus:
            lv = [g.label, g.name, g.uuid]
            if g.util is not None:
                duty.add_metric(lv, g.util * 100.0)
            if g.memory_used_bytes is not None:
                used.add_metric(lv, g.memory_used_bytes)
            if g.memory_total_bytes is not None:
                total.add_metric(lv, g.memory_total_bytes)
            if g.power_w is not None:
                mw.add_metric(lv, g.power_w * 1000.0)
            if g.uuid in owners:
                jobid.add_metric(lv, owners[g.uuid])
        yield from (duty, used, total, mw, jobid)


def make_registry(agent: Agent) -> CollectorRegistry:
    """The `/metrics` registry."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    return registry


def make_jobstats_registry(agent: Agent) -> CollectorRegistry:
    """The `/jobstats` registry (jobstats-compatible names)."""
    registry = CollectorRegistry()
    registry.register(JobstatsCollector(agent))
    return registry


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """A scrape every few seconds is not worth a log line."""


def _app(agent: Agent, jobstats_compat: bool) -> Callable[..., Iterable[bytes]]:
    """`/jobstats` (when enabled) to the jobstats registry, every other path to the
    agent's own, as prometheus_client serves any path."""
    main = make_wsgi_app(make_registry(agent))
    compat = make_wsgi_app(make_jobstats_registry(agent)) if jobstats_compat else None

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == JOBSTATS_PATH:
            if compat is None:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"jobstats_compat is off in the agent's [exporter] section\n"]
            return compat(environ, start_response)
        return main(environ, start_response)

    return app


def serve(agent: Agent, listen: str, port: int, jobstats_compat: bool = True):
    """Start the metrics HTTP server in a thread; returns (server, thread)."""

    class Server(ThreadingWSGIServer):
        address_family = socket.getaddrinfo(listen, port, type=socket.SOCK_STREAM)[0][0]

    httpd = make_server(
        listen, port, _app(agent, jobstats_compat), Server, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread
