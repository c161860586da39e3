"""Prometheus metrics built from the agent's latest sample at scrape time.

A custom collector (not long-lived Gauges) so a job's series vanish when the job leaves.
The job label is `jobid`, not `job`: Prometheus sets `job` on every target itself and
would rename ours to `exported_job`. GPU labels follow dcgm-exporter (`gpu`, `UUID` is
spelled `uuid` as in jobstats, `modelName`); with `jobstats_compat` the agent also
exports the `nvidia_gpu_*` names of Princeton's jobstats GPU exporter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from nodeagent.agent import Agent

P = "slurm_ext_"


class AgentCollector:
    def __init__(self, agent: Agent, jobstats_compat: bool = True) -> None:
        self.agent = agent
        self.jobstats_compat = jobstats_compat

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        gl = ["gpu", "uuid", "modelName"]
        util = GaugeMetricFamily(P + "gpu_utilization_ratio", "GPU busy fraction (0..1)", labels=gl)
        mem = GaugeMetricFamily(P + "gpu_memory_used_bytes", "GPU memory in use", labels=gl)
        memt = GaugeMetricFamily(P + "gpu_memory_total_bytes", "GPU memory size", labels=gl)
        power = GaugeMetricFamily(P + "gpu_power_watts", "GPU power draw", labels=gl)
        energy = CounterMetricFamily(
            P + "gpu_energy_joules",
            "GPU energy since the agent's state began",
            labels=["gpu", "uuid", "modelName"],
        )
        jl = ["jobid", "gpu", "uuid"]
        jutil = GaugeMetricFamily(
            P + "job_gpu_utilization_ratio", "Job's share of GPU time", labels=jl
        )
        jmem = GaugeMetricFamily(P + "job_gpu_memory_used_bytes", "Job's GPU memory", labels=jl)
        jgpue = CounterMetricFamily(
            P + "job_gpu_energy_joules", "GPU energy attributed to the job", labels=["jobid"]
        )
        jcpue = CounterMetricFamily(
            P + "job_cpu_energy_joules", "CPU (RAPL) energy attributed to the job", labels=["jobid"]
        )
        jgpus = CounterMetricFamily(
            P + "job_gpu_seconds", "GPU-seconds held by the job", labels=["jobid"]
        )
        jcpus = CounterMetricFamily(
            P + "job_cpu_seconds", "CPU seconds used by the job", labels=["jobid"]
        )
        jrss = GaugeMetricFamily(
            P + "job_memory_rss_bytes", "Summed RSS of the job's processes", labels=["jobid"]
        )
        jpaused = GaugeMetricFamily(
            P + "job_paused", "1 while the agent holds the job paused", labels=["jobid", "class"]
        )
        cpue = CounterMetricFamily(P + "node_cpu_energy_joules", "CPU package energy (RAPL)")
        acts = CounterMetricFamily(
            P + "colocation_actions", "Pauses and resumes by the agent", labels=["action", "reason"]
        )
        verdicts = CounterMetricFamily(
            P + "eaco_verdicts",
            "EaCO admission verdicts, by inputs: learnt from history or configured",
            labels=["verdict", "inputs"],
        )
        errs = CounterMetricFamily(
            P + "agent_errors",
            "Errors by source (gpu, slurm, state, report, step)",
            labels=["source"],
        )
        samples = CounterMetricFamily(P + "agent_samples", "Samples taken")
        dur = GaugeMetricFamily(P + "agent_sample_cpu_seconds", "CPU time of the last sample")
        with a.lock:
            for g in a.gpus:
                lv = [g.label, g.uuid, g.name]
                if g.util is not None:
                    util.add_metric(lv, g.util)
                if g.memory_used_bytes is not None:
                    mem.add_metric(lv, g.memory_used_bytes)
                if g.memory_total_bytes is not None:
                    memt.add_metric(lv, g.memory_total_bytes)
                if g.power_w is not None:
                    power.add_metric(lv, g.power_w)
                if g.uuid in a.gpu_energy_total:
                    energy.add_metric(lv, a.gpu_energy_total[g.uuid])
            for u in a.job_gpu:
                lv = [str(u.job_id), u.gpu.label, u.gpu.uuid]
                if u.util is not None:
                    jutil.add_metric(lv, u.util)
                jmem.add_metric(lv, u.memory_bytes)
            for job, acc in a.accounts.items():
                j = [str(job)]
                jgpue.add_metric(j, acc.gpu_energy_j)
                jcpue.add_metric(j, acc.cpu_energy_j)
                jgpus.add_metric(j, acc.gpu_seconds)
                jcpus.add_metric(j, acc.cpu_s)
                jpaused.add_metric([str(job), acc.klass], 1.0 if job in a.paused else 0.0)
                jp = a.jobs.get(job)
                if jp is not None:
                    jrss.add_metric(j, jp.rss_bytes)
            cpue.add_metric([], a.cpu_energy_total)
            for (kind, code), n in sorted(a.action_counts.items()):
                acts.add_metric([kind, code], n)
            for (verdict, inputs), n in sorted(a.eaco_verdicts.items()):
                verdicts.add_metric([verdict, inputs], n)
            for source, n in sorted(a.error_counts.items()):
                errs.add_metric([source], n)
            samples.add_metric([], a.samples_total)
            dur.add_metric([], a.last_duration_s)
            compat = list(self._jobstats(a)) if self.jobstats_compat else []
        yield from (util, mem, memt, power, energy, jutil, jmem, jgpue, jcpue, jgpus, jcpus)
        yield from (jrss, jpaused, cpue, acts, verdicts, errs, samples, dur)
        yield from compat

    def _jobstats(self, a: Agent) -> Iterator[Metric]:
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
        for u in a.job_gpu:
            owners[u.gpu.uuid] = min(owners.get(u.gpu.uuid, u.job_id), u.job_id)
        for g in a.gpus:
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


def make_registry(agent: Agent, jobstats_compat: bool = True) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent, jobstats_compat))
    return registry


def serve(agent: Agent, listen: str, port: int, jobstats_compat: bool = True):
    """Start the /metrics HTTP server in a thread; returns (server, thread)."""
    return start_http_server(port, addr=listen, registry=make_registry(agent, jobstats_compat))
