"""Energy counters, RAPL files, and attribution to jobs: hand-computed cases."""

from __future__ import annotations

import os

import pytest

from nodeagent.energy import (
    GpuEnergyMeter,
    RaplReader,
    counter_delta,
    cpu_job_energy,
    gpu_job_weights,
    split,
)
from nodeagent.gpu import GpuProcess


def test_counter_delta_plain_wrap_and_reset():
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(900, 50, 1000) == 150  # 100 to the wrap, 50 after
    assert counter_delta(900, 50, None) == 0  # reset with unknown range: count nothing


def test_split_proportional_and_degenerate():
    assert split(90.0, {1: 2.0, 2: 1.0}) == {1: 60.0, 2: 30.0}
    assert split(90.0, {1: 0.0, 2: 0.0}) == {}
    assert split(0.0, {1: 1.0}) == {}


def test_gpu_weights_by_gpu_time():
    procs = [GpuProcess(10, 1000, 0.6), GpuProcess(11, 3000, 0.2), GpuProcess(20, 500, 0.2)]
    w, basis = gpu_job_weights(procs, {10: 1, 11: 1, 20: 2}, util_known=True)
    assert basis == "gpu-time"
    assert w == pytest.approx({1: 0.8, 2: 0.2})
    assert split(100.0, w) == pytest.approx({1: 80.0, 2: 20.0})


def test_gpu_weights_fall_back_to_memory_then_equal():
    procs = [GpuProcess(10, 3 * 2**30), GpuProcess(20, 2**30), GpuProcess(30, 0)]
    w, basis = gpu_job_weights(procs, {10: 1, 20: 2}, util_known=False)
    assert basis == "memory"
    assert split(40.0, w) == pytest.approx({1: 30.0, 2: 10.0})  # pid 30 holds nothing
    # per-process utilisation known but every process idle: memory decides
    idle = [GpuProcess(10, 100, 0.0), GpuProcess(20, 300, 0.0)]
    w, basis = gpu_job_weights(idle, {10: 1, 20: 2}, util_known=True)
    assert basis == "memory" and split(8.0, w) == pytest.approx({1: 2.0, 2: 6.0})
    w, basis = gpu_job_weights([GpuProcess(10, None), GpuProcess(20, None)], {10: 1, 20: 2}, False)
    assert basis == "equal" and split(8.0, w) == {1: 4.0, 2: 4.0}


def test_gpu_weights_unmapped_process_keeps_its_share():
    procs = [GpuProcess(10, 0, 0.5), GpuProcess(99, 0, 0.5)]
    w, _ = gpu_job_weights(procs, {10: 1}, util_known=True)
    assert split(10.0, w) == {1: 5.0, 0: 5.0}  # job 0 = unattributed


def test_cpu_energy_by_share_of_node_cpu_time():
    # node ran 8 CPU-seconds; job 1 used 2, job 2 used 4: a quarter and a half of 100 J
    assert cpu_job_energy(100.0, {1: 2.0, 2: 4.0, 3: 0.0}, 8.0) == {1: 25.0, 2: 50.0}
    # node figure missing or smaller than the jobs' own: the jobs' total is used
    assert cpu_job_energy(60.0, {1: 1.0, 2: 2.0}, None) == {1: 20.0, 2: 40.0}
    assert cpu_job_energy(60.0, {1: 1.0, 2: 2.0}, 1.5) == {1: 20.0, 2: 40.0}


def test_gpu_meter_counter_and_power_integration():
    m = GpuEnergyMeter()
    assert m.update("a", 0.0, 1_000_000, 300.0) == 0.0
    assert m.update("a", 5.0, 1_003_500, 999.0) == 3.5  # counter wins over power
    assert m.update("b", 0.0, None, 100.0) == 0.0
    assert m.update("b", 2.0, None, 300.0) == 400.0  # trapezoid: 2 s x (100+300)/2
    assert m.update("b", 3.0, None, None) == 0.0  # no power: nothing to integrate


def _zone(root, name, energy, max_range):
    d = root / name
    d.mkdir()
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def test_rapl_sums_packages_handles_wrap(tmp_path):
    p0 = _zone(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    p1 = _zone(tmp_path, "intel-rapl:1", 5_000_000, 1_000_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 1, 1_000_000_000)  # sub-zone overlaps package 0
    r = RaplReader(tmp_path)
    assert [z.name for z in r.zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert r.delta_j() is None  # first call only sets the baseline
    (p0 / "energy_uj").write_text("2000000\n")  # wrapped: 1 J to the top + 2 J after
    (p1 / "energy_uj").write_text("12000000\n")  # +7 J
    assert r.delta_j() == pytest.approx(10.0)


def test_rapl_unreadable_reported_once_not_fatal(tmp_path, caplog):
    p0 = _zone(tmp_path, "intel-rapl:0", 1_000_000, 10**12)
    p1 = _zone(tmp_path, "intel-rapl:1", 1_000_000, 10**12)
    r = RaplReader(tmp_path)
    r.delta_j()
    (p1 / "energy_uj").unlink()
    (p1 / "energy_uj").mkdir()  # reading a directory fails even for root
    (p0 / "energy_uj").write_text("4000000\n")
    with caplog.at_level("WARNING"):
        assert r.delta_j() == pytest.approx(3.0)
        assert r.delta_j() == 0.0
    assert sum("cannot read" in m for m in caplog.messages) == 1


def test_rapl_missing_root(tmp_path):
    r = RaplReader(tmp_path / "absent")
    assert not r.available and r.delta_j() is None and r.reported


def test_rapl_real_machine_if_present():
    if not os.path.isdir("/sys/class/powercap"):
        pytest.skip("this kernel exposes no /sys/class/powercap (no RAPL here)")
    r = RaplReader()
    r.delta_j()
    d = r.delta_j()
    assert d is None or d >= 0
