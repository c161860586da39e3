"""GPU readings behind one narrow interface: NVML on real nodes, a simulation elsewhere.

Every NVML call is guarded on its own, per GPU: a NotSupported power reading or a lost
GPU costs that one value (recorded in `GpuSample.errors`), never the whole sample.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class GpuUnavailable(RuntimeError):
    """No GPU backend at all (library missing, driver not loaded)."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None  # None when NVML does not say (e.g. some MIG/MPS cases)
    sm_util: float | None = None  # 0..1 share of SM time; None when not measurable


@dataclass(frozen=True)
class GpuSample:
    """One GPU (or MIG instance) at one instant."""

    index: int  # NVML index of the physical GPU
    uuid: str
    name: str
    util: float | None = None  # 0..1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None  # total-energy counter since driver load; None if unsupported
    processes: tuple[GpuProcess, ...] = ()
    # True when per-process utilisation was asked successfully (no samples -> sm_util 0).
    process_util_known: bool = False
    mig_index: int | None = None  # set on MIG instances
    parent_uuid: str | None = None  # the physical GPU of a MIG instance
    errors: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The `gpu` label: "0" for a GPU, "0/mig1" for a MIG instance."""
        return str(self.index) if self.mig_index is None else f"{self.index}/mig{self.mig_index}"


class GpuReader(Protocol):
    def read(self) -> list[GpuSample]:
        """Sample every GPU and MIG instance; raise GpuUnavailable only if none can be read."""
        ...

    def describe(self) -> dict[str, Any]:
        """Backend facts worth logging (driver version, device count)."""
        ...


@dataclass
class EnergyEstimate:
    """Per GPU: when the counter was last read, and the reported value since."""

    read_at: float
    t: float
    value_mj: float
    power_w: float


class NvmlGpuReader:
    """Real GPUs through pynvml (nvidia-ml-py), imported lazily so CI needs no driver."""

    def __init__(
        self,
        util_window_s: float = 10.0,
        energy_interval_s: float = 0.0,
        nvml: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`energy_interval_s`: read the total-energy counter at most this often per GPU
        and integrate power in between; the counter read costs ~4 ms of CPU on an H100
        (driver 580), a hundred times a power read. `nvml`: the module, for tests."""
        if nvml is None:
            try:
                import pynvml as nvml  # noqa: PLC0415 - lazy on purpose
            except ImportError as exc:
                raise GpuUnavailable(
                    f"NVML unavailable: nvidia-ml-py is not installed ({exc}); install the "
                    "agent extra: pip install 'slurm-ext[agent]'"
                ) from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML unavailable: {exc}") from exc
        self.nvml = nvml
        self.util_window_s = util_window_s
        self.energy_interval_s = energy_interval_s
        self.clock = clock
        self._last_ts: dict[str, int] = {}  # per-GPU newest per-process sample seen (µs)
        self._energy: dict[str, EnergyEstimate] = {}

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": "nvml"}
        out["driver_version"] = self._call(self.nvml.nvmlSystemGetDriverVersion, [], "driver")
        out["device_count"] = self._call(self.nvml.nvmlDeviceGetCount, [], "count")
        return out

    def _call(self, fn: Callable[..., Any], errors: list[str], what: str, *args: Any) -> Any:
        try:
            value = fn(*args)
        except self.nvml.NVMLError as exc:
            errors.append(f"{what}: {exc}")
            return None
        return value.decode() if isinstance(value, bytes) else value

    def read(self) -> list[GpuSample]:
        nv = self.nvml
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise GpuUnavailable(f"NVML unavailable: {exc}") from exc
        out: list[GpuSample] = []
        for i in range(count):
            errors: list[str] = []
            handle = self._call(nv.nvmlDeviceGetHandleByIndex, errors, "handle", i)
            if handle is None:
                out.append(GpuSample(index=i, uuid=f"unknown-{i}", name="", errors=tuple(errors)))
                continue
            sample = self._read_device(handle, i, None, None, errors)
            out.append(sample)
            out.extend(self._read_mig(handle, i, sample.uuid))
        return out

    def _read_device(
        self, handle: Any, index: int, mig_index: int | None, parent: str | None, errors: list[str]
    ) -> GpuSample:
        nv = self.nvml
        uuid = self._call(nv.nvmlDeviceGetUUID, errors, "uuid", handle) or f"unknown-{index}"
        name = self._call(nv.nvmlDeviceGetName, errors, "name", handle) or ""
        util = None
        rates = self._call(nv.nvmlDeviceGetUtilizationRates, errors, "utilization", handle)
        if rates is not None:
            util = rates.gpu / 100.0
        mem_used = mem_total = None
        mem = self._call(nv.nvmlDeviceGetMemoryInfo, errors, "memory", handle)
        if mem is not None:
            mem_used, mem_total = int(mem.used), int(mem.total)
        power = None
        mw = self._call(nv.nvmlDeviceGetPowerUsage, errors, "power", handle)
        if mw is not None:
            power = mw / 1000.0
        energy = None
        if mig_index is None:  # the energy counter belongs to the physical GPU
            energy = self._energy_mj(handle, uuid, power, errors)
        procs = self._processes(handle, errors)
        if len(procs) == 1 and util is not None:
            # One process: it is the GPU's whole use; skip the ~2 ms per-process query.
            per_pid, util_known = {procs[0].pid: util}, True
            self._last_ts[uuid] = int(time.time() * 1e6)
        else:
            per_pid, util_known = self._process_util(handle, uuid, errors)
        if util_known:
            procs = [GpuProcess(p.pid, p.used_memory_bytes, per_pid.get(p.pid, 0.0)) for p in procs]
        return GpuSample(
            index=index,
            uuid=uuid,
            name=name,
            util=util,
            memory_used_bytes=mem_used,
            memory_total_bytes=mem_total,
            power_w=power,
            energy_mj=int(energy) if energy is not None else None,
            processes=tuple(procs),
            process_util_known=util_known,
            mig_index=mig_index,
            parent_uuid=parent,
            errors=tuple(errors),
        )

    def _processes(self, handle: Any, errors: list[str]) -> list[GpuProcess]:
        nv = self.nvml
        seen: dict[int, GpuProcess] = {}
        for what, fn in (
            ("compute processes", nv.nvmlDeviceGetComputeRunningProcesses),
            ("mps processes", nv.nvmlDeviceGetMPSComputeRunningProcesses),
        ):
            sub: list[str] = []
            infos = self._call(fn, sub, what, handle)
            if sub and what == "compute processes":
                errors.extend(sub)  # MPS listing is optional; its NotSupported is noise
            for info in infos or []:
                mem = getattr(info, "usedGpuMemory", None)
                seen.setdefault(int(info.pid), GpuProcess(int(info.pid), mem))
        return list(seen.values())

    def _energy_mj(
        self, handle: Any, uuid: str, power_w: float | None, errors: list[str]
    ) -> int | None:
        """The counter, or between counter reads the last one plus integrated power.
        Never decreasing: an estimate that ran ahead waits for the counter to catch up."""
        now = self.clock()
        est = self._energy.get(uuid)
        if est is not None and now - est.read_at < self.energy_interval_s and power_w is not None:
            est.value_mj += (now - est.t) * (est.power_w + power_w) / 2.0 * 1000.0
            est.t, est.power_w = now, power_w
            return int(est.value_mj)
        counter = self._call(
            self.nvml.nvmlDeviceGetTotalEnergyConsumption, errors, "energy", handle
        )
        if counter is None:
            self._energy.pop(uuid, None)
            return None
        value = max(float(counter), est.value_mj) if est is not None else float(counter)
        self._energy[uuid] = EnergyEstimate(
            now, now, value, power_w if power_w is not None else 0.0
        )
        return int(value)

    def _process_util(
        self, handle: Any, uuid: str, errors: list[str]
    ) -> tuple[dict[int, float], bool]:
        """Mean SM share per PID since the last sample; asking with timestamp 0 answers
        'Not Found' on current drivers, so ask from a recent timestamp and read Not Found
        as 'no samples' (every process idle)."""
        nv = self.nvml
        since = self._last_ts.get(uuid) or int((time.time() - self.util_window_s) * 1e6)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, since)
        except nv.NVMLError as exc:
            if exc.value in (nv.NVML_ERROR_NOT_FOUND, 0):  # 0: pynvml raises on an empty list
                return {}, True
            errors.append(f"process utilization: {exc}")
            return {}, False
        sums: dict[int, list[float]] = {}
        newest = since
        for s in samples:
            sums.setdefault(int(s.pid), []).append(float(s.smUtil))
            newest = max(newest, int(s.timeStamp))
        self._last_ts[uuid] = newest
        return {pid: min(1.0, sum(v) / len(v) / 100.0) for pid, v in sums.items()}, True

    def _read_mig(self, handle: Any, index: int, parent_uuid: str) -> list[GpuSample]:
        nv = self.nvml
        probe: list[str] = []
        mode = self._call(nv.nvmlDeviceGetMigMode, probe, "mig mode", handle)
        if not mode or mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        count = self._call(nv.nvmlDeviceGetMaxMigDeviceCount, probe, "mig count", handle) or 0
        for m in range(count):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, m)
            except nv.NVMLError:
                continue  # slot not populated
            out.append(self._read_device(mig, index, m, parent_uuid, []))
        return out


@dataclass
class SimGpu:
    """State of one simulated GPU; tests set these fields directly or through the reader."""

    util: float = 0.0
    power_w: float = 70.0
    memory_total_bytes: int = 80 * 2**30
    memory_base_bytes: int = 0  # used memory not held by any listed process
    energy_counter: bool = True  # False: behave like a GPU whose counter is NotSupported
    failed: bool = False  # True: every call answers "GPU is lost"
    energy_mj: float = 0.0
    processes: dict[int, GpuProcess] = field(default_factory=dict)


class SimulatedGpuReader:
    """GPUs for machines without any: tests place real PIDs on simulated GPUs.

    The energy counter integrates the set power over the clock, as the real counter does;
    processes whose PID has exited disappear from the listing, as with NVML.
    """

    def __init__(
        self,
        count: int = 1,
        name: str = "Simulated H100",
        clock: Callable[[], float] = time.monotonic,
        per_process_util: bool = True,
        processes_file: str = "",
    ) -> None:
        self.name = name
        self.clock = clock
        self.per_process_util = per_process_util
        self.processes_file = processes_file
        self.gpus = [SimGpu() for _ in range(count)]
        self._lock = threading.Lock()
        self._last = clock()
        self._file_stamp: tuple[int, int] | None = None

    def describe(self) -> dict[str, Any]:
        return {"backend": "simulated", "device_count": len(self.gpus), "name": self.name}

    def uuid(self, index: int) -> str:
        return f"GPU-sim-{index:04d}"

    def set_gpu(self, index: int, **values: Any) -> None:
        with self._lock:
            self._advance()
            for key, value in values.items():
                if not hasattr(self.gpus[index], key):
                    raise AttributeError(f"SimGpu has no field {key!r}")
                setattr(self.gpus[index], key, value)

    def assign(self, pid: int, index: int, memory_bytes: int = 0, sm_util: float = 0.0) -> None:
        with self._lock:
            self.gpus[index].processes[pid] = GpuProcess(pid, memory_bytes, sm_util)

    def remove(self, pid: int) -> None:
        with self._lock:
            for g in self.gpus:
                g.processes.pop(pid, None)

    def _load_processes_file(self) -> None:
        """Placement for an agent in another process (end-to-end tests): a JSON list of
        {"pid", "gpu", "memory_bytes", "sm_util"} replacing every GPU's processes when the
        file changes. Unreadable or malformed: the previous placement stays."""
        try:
            st = os.stat(self.processes_file)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._file_stamp:
                return
            with open(self.processes_file) as f:
                items = json.load(f)
            placed = [
                (
                    int(d["gpu"]),
                    GpuProcess(
                        int(d["pid"]), int(d.get("memory_bytes", 0)), float(d.get("sm_util", 0.0))
                    ),
                )
                for d in items
            ]
        except (OSError, ValueError, TypeError, KeyError):
            return
        self._file_stamp = stamp
        for g in self.gpus:
            g.processes = {}
        for index, proc in placed:
            if 0 <= index < len(self.gpus):
                self.gpus[index].processes[proc.pid] = proc

    def _advance(self) -> None:
        now = self.clock()
        dt = max(0.0, now - self._last)
        self._last = now
        for g in self.gpus:
            if not g.failed:
                g.energy_mj += g.power_w * dt * 1000.0

    def read(self) -> list[GpuSample]:
        with self._lock:
            self._advance()
            if self.processes_file:
                self._load_processes_file()
            out = []
            for i, g in enumerate(self.gpus):
                if g.failed:
                    out.append(GpuSample(i, self.uuid(i), "", errors=("all: GPU is lost",)))
                    continue
                live = {pid: p for pid, p in g.processes.items() if os.path.exists(f"/proc/{pid}")}
                g.processes = live
                procs = tuple(
                    p if self.per_process_util else GpuProcess(p.pid, p.used_memory_bytes)
                    for p in live.values()
                )
                used = g.memory_base_bytes + sum(p.used_memory_bytes or 0 for p in live.values())
                out.append(
                    GpuSample(
                        index=i,
                        uuid=self.uuid(i),
                        name=self.name,
                        util=g.util,
                        memory_used_bytes=min(used, g.memory_total_bytes),
                        memory_total_bytes=g.memory_total_bytes,
                        power_w=g.power_w,
                        energy_mj=int(g.energy_mj) if g.energy_counter else None,
                        processes=procs,
                        process_util_known=self.per_process_util,
                        errors=() if g.energy_counter else ("energy: Not Supported",),
                    )
                )
            return out
