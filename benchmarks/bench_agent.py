"""Agent overhead: CPU time and RSS of the agent with 8 simulated GPUs and 200 real
processes in 50 Slurm-like job cgroups, at 1 s and 5 s intervals.

The agent's work per interval does not depend on the interval, so the CPU share at an
interval is (CPU seconds per sample) / interval; samples are taken back to back here to
keep the run short. Run as root: `.venv/bin/python benchmarks/bench_agent.py`.
A process's cgroup is read once per (pid, start time); the line "/proc/PID/cgroup reads
per sample" counts the re-reads left (processes outside any job younger than
nodeagent.cgroups.YOUNG_S, and new ones).
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time

from prometheus_client import generate_latest

from nodeagent.agent import Agent
from nodeagent.cgroups import read_mounts
from nodeagent.config import AgentConfig
from nodeagent.exporter import make_registry
from nodeagent.gpu import SimulatedGpuReader
from nodeagent.testing import SlurmLikeCgroups

GPUS, PROCS, JOBS, SAMPLES = 8, 200, 50, 40
CPU_TARGET, RSS_TARGET_MB = 0.01, 60.0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    mounts = read_mounts()
    if "freezer" in mounts.v1:
        cg = SlurmLikeCgroups(1, mounts.v1["freezer"])
    else:
        cg = SlurmLikeCgroups(2, mounts.v2)
    tmp = tempfile.mkdtemp()
    try:
        sim = SimulatedGpuReader(GPUS)
        for i in range(PROCS):
            job = 10_000 + i % JOBS
            env = {"SLURM_JOB_QOS": "scavenger" if job % 2 else "normal"}
            pid = cg.start(job, env=env, argv=["sleep", "600"])
            if i < JOBS:  # one GPU process per job, jobs spread over the GPUs
                sim.assign(pid, i % GPUS, 2**30, 0.3)
        for g in range(GPUS):
            sim.set_gpu(g, power_w=300.0, util=0.6)
        cfg = AgentConfig(node_name="bench", state_file=os.path.join(tmp, "state.json"))
        cfg.jobs.source = "environ"  # simulated jobs, no Slurm to ask
        agent = Agent(cfg, sim, None)
        agent.step()  # warm-up: first sight of every job reads its environment
        reads0 = agent.scanner.cgroup_reads
        costs = []
        for _ in range(SAMPLES):
            c0 = time.process_time()
            agent.step()
            costs.append(time.process_time() - c0)
        c0 = time.process_time()
        for _ in range(10):
            generate_latest(make_registry(agent))
        scrape = (time.process_time() - c0) / 10
        per_sample = statistics.mean(costs)
        cgroup_reads = (agent.scanner.cgroup_reads - reads0) / SAMPLES
        in_proc = sum(1 for n in os.listdir("/proc") if n.isdigit())
        rss = rss_mb()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"node agent overhead: {GPUS} simulated GPUs, {PROCS} processes in {JOBS} jobs, "
            f"{SAMPLES} samples; jobs seen {len(agent.accounts)}; {in_proc} processes in /proc"
        )
        print(f"{'measure':34} {'value':>10} {'target':>10} {'ratio':>7}")
        print(f"{'CPU s per sample (mean)':34} {per_sample:10.4f}")
        print(f"{'CPU s per sample (p95)':34} {sorted(costs)[int(0.95 * len(costs))]:10.4f}")
        print(f"{'/proc/PID/cgroup reads per sample':34} {cgroup_reads:10.1f}")
        print(f"{'CPU s per /metrics scrape':34} {scrape:10.4f}")
        for interval in (1.0, 5.0):
            share = (per_sample + scrape / 15) / interval  # one scrape every 15 s
            print(
                f"{f'CPU share of one core @ {interval:.0f} s':34} {share:10.2%} "
                f"{CPU_TARGET:10.0%} {share / CPU_TARGET:7.2f}"
            )
        print(
            f"{'RSS MB (after sampling)':34} {rss:10.1f} {RSS_TARGET_MB:10.0f} {rss / RSS_TARGET_MB:7.2f}"
        )
        print(
            f"{'peak RSS MB (incl. harness)':34} {peak:10.1f} {RSS_TARGET_MB:10.0f} {peak / RSS_TARGET_MB:7.2f}"
        )
    finally:
        cg.close()


if __name__ == "__main__":
    main()
