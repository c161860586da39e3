"""NvmlGpuReader's own logic (energy-counter cadence, the one-process shortcut) against a
small stand-in for the pynvml module: these paths hinge on call counts and timing that a
real GPU cannot be steered into. The real library is exercised by tests/test_nvml_live.py
on a GPU machine."""

from __future__ import annotations

import types

from nodeagent.gpu import NvmlGpuReader


class _Err(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(power_w: list[float], counter_mj: list[int], pids: list[int]):
    """One GPU; `power_w`/`counter_mj` are consumed one value per call."""
    calls = {"energy": 0, "process_util": 0}

    def energy(_h):
        calls["energy"] += 1
        return counter_mj.pop(0)

    def process_util(_h, _since):
        calls["process_util"] += 1
        return [types.SimpleNamespace(pid=p, smUtil=40, timeStamp=1) for p in pids]

    nv = types.SimpleNamespace(
        NVMLError=_Err,
        NVML_ERROR_NOT_FOUND=6,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: "h0",
        nvmlDeviceGetUUID=lambda h: "GPU-0",
        nvmlDeviceGetName=lambda h: "Fake",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=90, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=1, total=2),
        nvmlDeviceGetPowerUsage=lambda h: power_w.pop(0) * 1000,
        nvmlDeviceGetTotalEnergyConsumption=energy,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=p, usedGpuMemory=100) for p in pids
        ],
        nvmlDeviceGetMPSComputeRunningProcesses=lambda h: [],
        nvmlDeviceGetProcessUtilization=process_util,
        nvmlDeviceGetMigMode=lambda h: (0, 0),
    )
    return nv, calls


def test_counter_read_once_per_interval_and_power_integrated_between():
    now = [0.0]
    nv, calls = fake_nvml([500.0] * 5, [1_000_000, 9_000_000], [])
    r = NvmlGpuReader(energy_interval_s=30.0, nvml=nv, clock=lambda: now[0])
    readings = []
    for t in (0.0, 10.0, 20.0, 30.0):
        now[0] = t
        readings.append(r.read()[0].energy_mj)
    # t=0 counter; t=10, 20: +500 W x 10 s = +5 kJ each; t=30 the counter again (it says
    # +8 kJ, less than the 10 kJ estimated so far, so the reading holds, never goes back)
    assert readings == [1_000_000, 6_000_000, 11_000_000, 11_000_000]
    assert calls["energy"] == 2
    now[0] = 40.0
    assert r.read()[0].energy_mj == 16_000_000  # integration continues from the held value


def test_counter_every_read_by_default_and_a_counter_ahead_wins():
    nv, calls = fake_nvml([300.0] * 3, [10_000, 20_000, 5_000_000], [])
    r = NvmlGpuReader(nvml=nv, clock=lambda: 0.0)
    assert [r.read()[0].energy_mj for _ in range(3)] == [10_000, 20_000, 5_000_000]
    assert calls["energy"] == 3


def test_one_process_takes_the_gpu_util_without_the_per_process_query():
    nv, calls = fake_nvml([100.0], [1], [4242])
    g = NvmlGpuReader(nvml=nv).read()[0]
    assert calls["process_util"] == 0
    assert g.process_util_known and [(p.pid, p.sm_util) for p in g.processes] == [(4242, 0.9)]


def test_two_processes_are_asked_per_process():
    nv, calls = fake_nvml([100.0], [1], [4242, 4343])
    g = NvmlGpuReader(nvml=nv).read()[0]
    assert calls["process_util"] == 1
    assert g.process_util_known and sorted(p.sm_util for p in g.processes) == [0.4, 0.4]
