"""The NVML path against a real NVIDIA GPU: skipped where there is none (CI), run on a lent
GPU machine (docs/nodeagent.md). A bf16 matmul loop whose environment says job 4242 is the
load; the agent must see its PID and memory, map it to job 4242, and the energy counter
must grow at the rate the power reading says."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.gpu import GpuUnavailable, NvmlGpuReader

ROOT = Path(__file__).resolve().parents[1]


def _reader() -> NvmlGpuReader:
    if not Path("/dev/nvidiactl").exists():
        pytest.skip("no NVIDIA GPU on this machine (/dev/nvidiactl absent)")
    try:
        return NvmlGpuReader(util_window_s=10.0)
    except GpuUnavailable as exc:
        pytest.skip(f"NVML unavailable: {exc}")


@pytest.fixture
def load(tmp_path):
    """The matmul loop as job 4242 on GPU 0, running for real before the test starts."""
    reader = _reader()
    progress = tmp_path / "progress.log"
    env = dict(os.environ, SLURM_JOB_ID="4242", CUDA_VISIBLE_DEVICES="0")
    proc = subprocess.Popen(
        ["python3", str(ROOT / "scripts" / "gpu_load.py"), "--progress", str(progress)],
        env=env,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            lines = progress.read_text().splitlines() if progress.exists() else []
            if len(lines) >= 3:
                break
            if proc.poll() is not None:
                pytest.fail(f"gpu_load.py exited with {proc.returncode}")
            time.sleep(0.5)
        else:
            pytest.fail("gpu_load.py made no progress in 90 s")
        time.sleep(5)  # let power settle at the loop's level
        yield reader, proc
    finally:
        proc.kill()
        proc.wait()
        reader.close()


def test_energy_counter_grows_at_the_power_reading(load):
    reader, _ = load
    first = reader.read()[0]
    if first.energy_mj is None:
        pytest.skip(f"energy counter not supported here: {first.errors}")
    t0 = time.monotonic()
    powers = []
    while time.monotonic() - t0 < 10:
        powers.append(reader.read()[0].power_w)
        time.sleep(0.5)
    last = reader.read()[0]
    elapsed = time.monotonic() - t0
    growth_w = (last.energy_mj - first.energy_mj) / 1000.0 / elapsed
    power_w = statistics.mean(p for p in powers if p is not None)
    print(f"energy counter growth {growth_w:.1f} W, mean power reading {power_w:.1f} W")
    assert power_w > 150, "the matmul loop should draw well above idle power"
    assert abs(growth_w - power_w) / power_w < 0.10


def test_agent_maps_the_loop_to_its_job_and_gpu(load):
    reader, proc = load
    config = AgentConfig()
    config.state_file = ""
    config.jobs.source = "environ"
    config.colocation.enabled = False
    agent = Agent(config, reader, None)
    agent.step()
    time.sleep(3)
    agent.step()
    gpu = next(g for g in agent.snapshot.gpus if any(p.pid == proc.pid for p in g.processes))
    mine = next(p for p in gpu.processes if p.pid == proc.pid)
    assert mine.used_memory_bytes is None or mine.used_memory_bytes > 256 * 2**20
    assert gpu.util is not None and gpu.util > 0.5
    assert agent.snapshot.jobs[4242].from_environ and proc.pid in agent.snapshot.jobs[4242].pids
    uses = [u for u in agent.snapshot.job_gpu if u.job_id == 4242]
    assert [u.gpu.uuid for u in uses] == [gpu.uuid]
    print(
        f"gpu {gpu.name} util {gpu.util} per-process util known {gpu.process_util_known} "
        f"loop sm_util {mine.sm_util} job util {uses[0].util} memory {mine.used_memory_bytes}",
        file=sys.stderr,
    )


def test_energy_between_counter_reads_tracks_the_counter(load):
    """With the counter read every 10 s and power integrated in between (the agent's
    default cadence is 30 s), the readings must stay within a few % of the counter."""
    reader, _ = load
    handle = reader.nvml.nvmlDeviceGetHandleByIndex(0)
    sparse = NvmlGpuReader(util_window_s=10.0, energy_interval_s=10.0)
    try:
        first = sparse.read()[0].energy_mj
        if first is None:
            pytest.skip("energy counter not supported here")
        c0 = reader.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        for _ in range(25):
            time.sleep(1.0)
            last = sparse.read()[0].energy_mj
        c1 = reader.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    finally:
        sparse.close()
    print(f"readings grew {(last - first) / 1000:.0f} J, counter {(c1 - c0) / 1000:.0f} J")
    assert abs((last - first) - (c1 - c0)) / (c1 - c0) < 0.05
