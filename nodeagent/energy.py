"""Energy: counter deltas (with wrap-around), RAPL reading, and attribution to jobs.

The attribution functions are pure; the agent feeds them deltas and shares.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from nodeagent.gpu import GpuProcess

log = logging.getLogger(__name__)
K = TypeVar("K")


def counter_delta(prev: int, now: int, max_range: int | None) -> int:
    """Growth of a counter that wraps to 0 after `max_range` (RAPL energy_uj)."""
    if now >= prev:
        return now - prev
    if max_range:
        return max_range - prev + now
    return 0  # reset without a known range (driver reload): count nothing rather than guess


def split(delta: float, weights: Mapping[K, float]) -> dict[K, float]:
    """Split `delta` in proportion to non-negative weights; all-zero weights split nothing."""
    total = sum(w for w in weights.values() if w > 0)
    if total <= 0 or delta <= 0:
        return {}
    return {k: delta * w / total for k, w in weights.items() if w > 0}


def gpu_job_weights(
    processes: list[GpuProcess], job_of_pid: Mapping[int, int], util_known: bool
) -> tuple[dict[int, float], str]:
    """Each job's weight on one GPU and the basis used.

    By share of GPU time (per-process SM utilisation) when known and non-zero; else by
    GPU memory held; else equally among the jobs present. Processes of no job count
    under job 0 ("unattributed") so they take their share rather than inflate others'.
    """
    if not processes:
        return {}, "none"
    jobs = [job_of_pid.get(p.pid, 0) for p in processes]
    if util_known:
        w: dict[int, float] = {}
        for job, p in zip(jobs, processes, strict=True):
            w[job] = w.get(job, 0.0) + (p.sm_util or 0.0)
        if sum(w.values()) > 0:
            return w, "gpu-time"
    w = {}
    for job, p in zip(jobs, processes, strict=True):
        w[job] = w.get(job, 0.0) + float(p.used_memory_bytes or 0)
    if sum(w.values()) > 0:
        return w, "memory"
    return {job: 1.0 for job in jobs}, "equal"


def cpu_job_energy(
    delta_j: float, job_cpu_s: Mapping[int, float], node_busy_cpu_s: float | None
) -> dict[int, float]:
    """CPU energy to jobs by CPU-time share of everything the node ran in the interval.

    A job using 2 of the node's 8 busy CPU-seconds gets a quarter; the rest (other
    processes, idle power of a busy node) stays unattributed. Without a node figure the
    jobs' own total is the denominator."""
    used = {j: s for j, s in job_cpu_s.items() if s > 0}
    total = max(node_busy_cpu_s or 0.0, sum(used.values()))
    if total <= 0 or delta_j <= 0:
        return {}
    return {j: delta_j * s / total for j, s in used.items()}


@dataclass
class GpuEnergyMeter:
    """Per-GPU energy deltas: the NVML total-energy counter where it works, else power
    integrated over time (trapezoid between samples)."""

    last: dict[str, tuple[float, int | None, float | None]] = field(default_factory=dict)

    def update(self, uuid: str, t: float, energy_mj: int | None, power_w: float | None) -> float:
        prev = self.last.get(uuid)
        self.last[uuid] = (t, energy_mj, power_w)
        if prev is None:
            return 0.0
        t0, e0, p0 = prev
        if energy_mj is not None and e0 is not None:
            return counter_delta(e0, energy_mj, None) / 1000.0
        if power_w is None:
            return 0.0
        p_prev = p0 if p0 is not None else power_w
        return max(0.0, (t - t0) * (p_prev + power_w) / 2.0)


@dataclass
class RaplZone:
    name: str
    path: Path
    max_range_uj: int | None
    last_uj: int | None = None


class RaplReader:
    """CPU package energy from the powercap interface (intel-rapl, also used on AMD).

    Only top-level zones (`intel-rapl:N`) are summed; their sub-zones (core, uncore,
    dram) overlap them. An unreadable zone is logged once and skipped, never fatal."""

    def __init__(self, root: str | Path = "/sys/class/powercap") -> None:
        self.root = Path(root)
        self.reported: set[str] = set()
        self.zones: list[RaplZone] = []
        try:
            dirs = sorted(self.root.iterdir())
        except OSError as exc:
            self._report_once(str(self.root), f"RAPL powercap unavailable: {exc.strerror}")
            dirs = []
        for d in dirs:
            parts = d.name.split(":")
            if len(parts) != 2 or not (d / "energy_uj").exists():
                continue
            max_range = self._read_int(d / "max_energy_range_uj")
            self.zones.append(RaplZone(d.name, d, max_range))

    @property
    def available(self) -> bool:
        return bool(self.zones)

    def _report_once(self, key: str, message: str) -> None:
        if key not in self.reported:
            self.reported.add(key)
            log.warning("%s", message)

    def _read_int(self, path: Path) -> int | None:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError) as exc:
            self._report_once(str(path), f"RAPL: cannot read {path}: {exc}")
            return None

    def delta_j(self) -> float | None:
        """Joules used by all readable zones since the previous call; None on the first."""
        total = 0.0
        any_delta = False
        for z in self.zones:
            now = self._read_int(z.path / "energy_uj")
            if now is None:
                continue
            if z.last_uj is not None:
                total += counter_delta(z.last_uj, now, z.max_range_uj) / 1e6
                any_delta = True
            z.last_uj = now
        return total if any_delta else None
