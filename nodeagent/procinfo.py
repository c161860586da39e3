"""Who uses each GPU, and the host's CPU and memory, through psutil.

NVML gives only a PID per GPU process; psutil turns it into an owner, a command, CPU
and memory, so `show` and the metrics can name a user holding a GPU outside any job.
psutil is the better tool here: few processes, many fields each, and `cpu_percent`
keeps the previous reading per `Process` object. The per-job scan of every process on
the node stays the /proc scanner (nodeagent/cgroups.py): it is faster for that
(benchmarks/bench_agent.py measures both).

A command line is the user's own text: it is cut to MAX_COMMAND characters and never
becomes a metric label (only the user name does).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from nodeagent.gpu import GpuSample

MAX_COMMAND = 200  # characters of a command line kept


@dataclass(frozen=True)
class GpuProcessInfo:
    """One process NVML lists on one GPU, as psutil describes it."""

    gpu: str  # the `gpu` label ("0", "0/mig1")
    uuid: str
    pid: int
    job_id: int | None  # None: the process is in no Slurm job
    user: str  # user name, the uid as text when it has none, "" when unknown
    command: str  # command line (cut to MAX_COMMAND), "" when unknown
    cpu_percent: float | None  # since the previous sample (None at first sight)
    rss_bytes: int | None
    gpu_memory_bytes: int | None


@dataclass(frozen=True)
class HostView:
    """The node's CPU and memory at one sample."""

    cpu_count: int
    cpu_utilization: float | None  # 0..1 over all CPUs since the previous sample
    memory_total_bytes: int
    memory_available_bytes: int


class ProcessDescriber:
    """Describes GPU processes sample after sample. `psutil.Process` objects are kept
    per (pid, create time), with the owner and command read at first sight, so a sample
    reads only CPU and memory, a reused PID is a new process, and `cpu_percent` measures
    since the previous sample; processes no GPU lists any more are dropped."""

    def __init__(self) -> None:
        self._procs: dict[int, tuple[psutil.Process, str, str]] = {}
        self._host_primed = False

    def describe(
        self, gpus: Iterable[GpuSample], job_of_pid: dict[int, int]
    ) -> tuple[GpuProcessInfo, ...]:
        out: list[GpuProcessInfo] = []
        seen: set[int] = set()
        for g in gpus:
            for p in g.processes:
                seen.add(p.pid)
                user, command, cpu, rss = self._read(p.pid)
                out.append(
                    GpuProcessInfo(
                        g.label,
                        g.uuid,
                        p.pid,
                        job_of_pid.get(p.pid),
                        user,
                        command,
                        cpu,
                        rss,
                        p.used_memory_bytes,
                    )
                )
        for pid in [p for p in self._procs if p not in seen]:
            del self._procs[pid]
        return tuple(out)

    def _read(self, pid: int) -> tuple[str, str, float | None, int | None]:
        """(user, command, CPU percent, RSS) of one process; blanks when it is gone or
        cannot be read (another PID namespace, no permission)."""
        known = self._procs.get(pid)
        try:
            if known is None or not known[0].is_running():  # is_running: same create time
                proc = psutil.Process(pid)
                with proc.oneshot():
                    try:
                        user = proc.username()
                    except (KeyError, psutil.Error):  # no passwd entry: the uid
                        user = str(proc.uids().real)
                    command = (" ".join(proc.cmdline()) or proc.name())[:MAX_COMMAND]
                    proc.cpu_percent(None)  # the reference for the next sample
                    rss = proc.memory_info().rss
                self._procs[pid] = (proc, user, command)
                return user, command, None, rss
            proc, user, command = known
            with proc.oneshot():
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss
        except psutil.Error:
            self._procs.pop(pid, None)
            return "", "", None, None
        return user, command, cpu, rss

    def host(self) -> HostView:
        """The host's CPU use since the previous call (None at the first) and memory."""
        cpu = psutil.cpu_percent(None)
        mem = psutil.virtual_memory()
        primed, self._host_primed = self._host_primed, True
        return HostView(
            psutil.cpu_count() or 0,
            cpu / 100.0 if primed else None,
            int(mem.total),
            int(mem.available),
        )
