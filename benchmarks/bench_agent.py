"""Agent overhead: CPU time and RSS of the agent with 8 simulated GPUs and 200 real
processes in 50 Slurm-like job cgroups, at 1 s and 5 s intervals.

The agent's work per interval does not depend on the interval, so the CPU share at an
interval is (CPU seconds per sample) / interval; samples are taken back to back here to
keep the run short. Run as root: `.venv/bin/python -m benchmarks.bench_agent`.
A process's cgroup is read once per (pid, start time); the line "/proc/PID/cgroup reads
per sample" counts the re-reads left (processes outside any job younger than
nodeagent.cgroups.YOUNG_S, and new ones).

psutil against the /proc scanner, on the same processes: (a) the
per-job scan of every process on the node, as `JobScanner.scan` does it (CPU times, RSS,
start time, the cgroup read once per process) and as psutil would
(`process_iter` + `Process.cpu_times/memory_info`); (b) describing the processes a GPU
lists (owner, command, CPU, memory) with `ProcessDescriber` (psutil) and with plain
/proc reads. The agent's own footprint is read through psutil.
"""

from __future__ import annotations

import os
import pwd
import resource
import statistics
import tempfile
import time

import psutil
from prometheus_client import generate_latest

from nodeagent.agent import Agent
from nodeagent.cgroups import JobScanner, parse_proc_cgroup, read_mounts, read_proc_stat
from nodeagent.config import AgentConfig
from nodeagent.exporter import make_registry
from nodeagent.gpu import SimulatedGpuReader
from nodeagent.procinfo import ProcessDescriber
from nodeagent.testing import SlurmLikeCgroups

GPUS, PROCS, JOBS, SAMPLES = 8, 200, 50, 40
CPU_TARGET, RSS_TARGET_MB = 0.01, 60.0


SCAN_ROUNDS = 20


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


class PsutilScanner:
    """What JobScanner does, written with psutil: every process's CPU time and RSS each
    scan, its cgroup read once per (pid, create time)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[float, int | None]] = {}

    def scan(self) -> dict[int, tuple[list[int], float, int]]:
        jobs: dict[int, tuple[list[int], float, int]] = {}
        for p in psutil.process_iter(["create_time", "cpu_times", "memory_info"]):
            info = p.info
            if info["cpu_times"] is None or info["memory_info"] is None:
                continue
            known = self.known.get(p.pid)
            if known is None or known[0] != info["create_time"]:
                try:
                    with open(f"/proc/{p.pid}/cgroup") as f:
                        job = parse_proc_cgroup(f.read()).job_id
                except OSError:
                    continue
                known = self.known[p.pid] = (info["create_time"], job)
            if known[1] is None:
                continue
            pids, cpu, rss = jobs.get(known[1], ([], 0.0, 0))
            t = info["cpu_times"]
            pids.append(p.pid)
            jobs[known[1]] = (pids, cpu + t.user + t.system, rss + info["memory_info"].rss)
        return jobs


def proc_describe(pids: list[int]) -> list[tuple[int, str, str, float, int]]:
    """(pid, user, command, CPU s, RSS) of each process from /proc directly."""
    out = []
    for pid in pids:
        st = read_proc_stat(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(ln.split()[1]) for ln in f if ln.startswith("Uid:"))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        except (OSError, StopIteration):
            continue
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        if st is not None:
            out.append((pid, user, cmd, st.cpu_s, st.rss_bytes))
    return out


def timed(fn, rounds: int) -> float:
    """Mean CPU seconds of one call, after one warm-up call."""
    fn()
    c0 = time.process_time()
    for _ in range(rounds):
        fn()
    return (time.process_time() - c0) / rounds


def compare_psutil(gpu_pids: list[int], sim: SimulatedGpuReader) -> None:
    scanner, ps = JobScanner(), PsutilScanner()
    ours = {j: sorted(jp.pids) for j, jp in scanner.scan().items()}
    theirs = {j: sorted(v[0]) for j, v in ps.scan().items()}
    assert ours == theirs, "the two scanners disagree"
    t_proc = timed(scanner.scan, SCAN_ROUNDS)
    t_psutil = timed(ps.scan, SCAN_ROUNDS)
    gpus = sim.read()
    describer = ProcessDescriber()
    t_desc = timed(lambda: describer.describe(gpus, {}), SCAN_ROUNDS)
    t_first = timed(lambda: ProcessDescriber().describe(gpus, {}), SCAN_ROUNDS)
    t_procdesc = timed(lambda: proc_describe(gpu_pids), SCAN_ROUNDS)
    n = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(f"psutil vs the /proc scanner ({n} processes, {len(ours)} jobs; CPU ms per call)")
    print(f"{'what':44} {'/proc':>8} {'psutil':>8} {'psutil//proc':>12}")
    print(
        f"{'per-job scan of every process (cached)':44} {t_proc * 1e3:8.2f} "
        f"{t_psutil * 1e3:8.2f} {t_psutil / t_proc:12.2f}"
    )
    print(
        f"{f'describe {len(gpu_pids)} GPU processes, steady':44} {t_procdesc * 1e3:8.2f} "
        f"{t_desc * 1e3:8.2f} {t_desc / t_procdesc:12.2f}"
    )
    print(
        f"{f'describe {len(gpu_pids)} GPU processes, first sight':44} {t_procdesc * 1e3:8.2f} "
        f"{t_first * 1e3:8.2f} {t_first / t_procdesc:12.2f}"
    )


def main() -> None:
    mounts = read_mounts()
    if "freezer" in mounts.v1:
        cg = SlurmLikeCgroups(1, mounts.v1["freezer"])
    else:
        cg = SlurmLikeCgroups(2, mounts.v2)
    tmp = tempfile.mkdtemp()
    try:
        sim = SimulatedGpuReader(GPUS)
        gpu_pids = []
        for i in range(PROCS):
            job = 10_000 + i % JOBS
            env = {"SLURM_JOB_QOS": "scavenger" if job % 2 else "normal"}
            pid = cg.start(job, env=env, argv=["sleep", "600"])
            if i < JOBS:  # one GPU process per job, jobs spread over the GPUs
                sim.assign(pid, i % GPUS, 2**30, 0.3)
                gpu_pids.append(pid)
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
        own = psutil.Process().cpu_times()
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
        print(f"{'process CPU s so far (psutil)':34} {own.user + own.system:10.2f}")
        print()
        compare_psutil(gpu_pids, sim)
    finally:
        cg.close()


if __name__ == "__main__":
    main()
