"""GPU readers: the simulated backend's behaviour, and NVML failing cleanly without a driver."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeagent.gpu import GpuUnavailable, NvmlGpuReader, SimulatedGpuReader


def test_simulated_energy_counter_follows_power_and_dead_pids_vanish():
    t = [0.0]
    sim = SimulatedGpuReader(2, clock=lambda: t[0])
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sim.set_gpu(0, power_w=500.0)
        sim.assign(p.pid, 0, 2**30, 0.7)
        t[0] = 2.0
        g0, g1 = sim.read()
        assert g0.energy_mj == 1_000_000 and g1.energy_mj == 140_000  # 500 W and 70 W x 2 s
        assert [(q.pid, q.sm_util) for q in g0.processes] == [(p.pid, 0.7)]
        assert g0.memory_used_bytes == 2**30
    finally:
        p.kill()
        p.wait()
    assert sim.read()[0].processes == ()
    with pytest.raises(AttributeError):
        sim.set_gpu(0, wattage=1)


def test_simulated_without_per_process_util_or_counter():
    sim = SimulatedGpuReader(1, per_process_util=False)
    sim.set_gpu(0, energy_counter=False)
    sim.assign(1, 0, 10, 0.5)  # PID 1 always exists
    g = sim.read()[0]
    assert g.energy_mj is None and not g.process_util_known
    assert g.processes[0].sm_util is None and g.errors


def test_nvml_reader_without_driver_says_unavailable():
    try:
        reader = NvmlGpuReader()
    except GpuUnavailable as exc:
        assert str(exc).startswith("NVML unavailable")
        return
    gpus = reader.read()  # a real NVIDIA machine: every GPU answers something
    assert gpus and all(g.uuid for g in gpus)
    reader.close()
