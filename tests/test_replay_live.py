"""`slurm-ext replay` on a real slurmctld + slurmdbd: metrics, resume, time limits, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for

from slurm_ext.policy import PolicyConfig
from slurm_ext.replay.metrics import KEYS
from slurm_ext.replay.modes import ClusterSpec, ReplayOptions, replay_mode
from slurm_ext.sim.traces import TraceJob
from slurm_ext.testing.cluster import LocalCluster

SLURM_EXT = [sys.executable, "-m", "slurm_ext.cli"]
pytestmark = pytest.mark.slurm
SPEEDUP = 60.0  # a trace minute per wall second
# the requeue cost rule off: this checks the replay's mechanics (a requeue, a resume from
# the checkpoint), and the rule would let job 0 finish rather than lose its work
POLICY = PolicyConfig(queue_thresholds_gpu_s=[1200.0], min_run_s=1200.0, preemption_cost=False)


def _trace() -> list[TraceJob]:
    """2 nodes x 4 GPUs. Job 0 (4 GPUs, checkpoints) fills node1; job 1 (3 GPUs) and
    job 2 (1 GPU, limit 1 wall minute, far more work) fill node2. Job 3 (2 GPUs) arrives
    once job 0 has left queue 0 (1200 s run, see POLICY), so the service requeues job 0
    for it; 20 short jobs come at the end."""
    jobs = [
        TraceJob(0, 4, 0.0, 3600.0, checkpoint=True),
        TraceJob(1, 3, 0.0, 3600.0),
        TraceJob(2, 1, 0.0, 30000.0, time_limit_s=3600.0),
        TraceJob(3, 2, 1800.0, 600.0),
    ]
    jobs += [TraceJob(10 + i, 1, 3600.0 + 30 * i, 120.0) for i in range(20)]
    return jobs


def test_replay_service_requeue_resumes_and_times_out(tmp_path: Path) -> None:
    options = ReplayOptions(SPEEDUP, checkpoint_interval_s=1200.0, policy=POLICY)
    row = replay_mode(_trace(), "service-requeue", tmp_path, options, ClusterSpec(2, 4))
    assert set(KEYS) <= set(row)
    assert row["jobs"] == 24
    assert row["timeouts"] == 1
    assert row["requeues"] >= 1 and row["preemptions"] >= row["requeues"]
    assert 0 < row["gpu_utilization"] <= 1
    assert row["median_jct_s"] <= row["p95_jct_s"] <= row["p99_jct_s"] <= row["makespan_s"]
    assert 0 <= row["avg_queue_s"] < row["avg_jct_s"]
    assert row["accounting"] is True
    recs = json.loads((tmp_path / "records.json").read_text())
    # job 0 was requeued and resumed from its last checkpoint, not from zero
    starts = [
        float(line.split()[2])
        for line in (tmp_path / "jobs" / "replay-0.ckpt.log").read_text().splitlines()
        if line.split()[1] == "start"
    ]
    assert recs["0"]["requeues"] >= 1 and recs["0"]["state"] == "COMPLETED"
    assert len(starts) >= 2 and starts[0] == 0.0
    assert 0 < starts[1] < recs["0"]["work_wall_s"]
    assert "done" in (tmp_path / "jobs" / "replay-0.ckpt.log").read_text()
    # job 2 was killed by Slurm at its limit (1 minute; Slurm checks limits every ~30 s)
    assert recs["2"]["state"] == "TIMEOUT"
    ((start, end),) = recs["2"]["runs"]
    assert 60 <= end - start <= 60 + 50
    assert "done" not in (tmp_path / "jobs" / "replay-2.ckpt.log").read_text()
    # the job without the opt-in was never requeued
    assert recs["1"]["requeues"] == 0


def _csv(path: Path, rows: list[tuple[int, int, float, float]]) -> Path:
    lines = ["job_id,num_gpu,submit_time,iterations,model_name,duration,interval"]
    lines += [f"{i},{g},{s},0,resnet50,{d},0" for i, g, s, d in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _wait_line(proc: subprocess.Popen, needle: str, timeout: float = 90.0) -> str:
    """Read the replay's stderr until a line contains `needle`; return what was read."""
    seen = ""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"no {needle!r} in the replay's output:\n{seen}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_replay_sigint_cancels_and_stops_its_daemons(tmp_path: Path) -> None:
    trace = _csv(tmp_path / "t.csv", [(i, 1, 0.0, 6000.0) for i in range(6)])
    work = tmp_path / "work"
    proc = subprocess.Popen(
        [*SLURM_EXT, "replay", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "2",
         "--speedup", "10", "--workdir", str(work)],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_line(proc, "submitted 6/6")
        root = work / "slurm" / "cluster"
        pid_files = [root / "run" / "slurmctld.pid", root / "run" / "slurmd-node1.pid"]
        pid_files += [root / "db" / "mysqld.pid", root / "run" / "slurmdbd.pid"]
        pids = [int(p.read_text().split()[0]) for p in pid_files]
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "cancelled" in err
    assert not [p for p in pids if _alive(p)], "daemons left running"


def test_replay_on_existing_partition_cancels_only_its_jobs(
    clean_queue: LocalCluster, tmp_path: Path
) -> None:
    cluster = clean_queue
    outsider = cluster.sbatch("--gres=gpu:1", "-J", "not-the-replays", wrap="sleep 300")
    trace = _csv(tmp_path / "t.csv", [(i, 1, 0.0, 6000.0) for i in range(4)])
    proc = subprocess.Popen(
        [*SLURM_EXT, "replay", "--trace", str(trace), "--slurm-conf", str(cluster.conf_path),
         "--partition", cluster.partition, "--speedup", "10", "--workdir", str(tmp_path / "w")],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_line(proc, "submitted 4/4")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err

    def left(states: str) -> list[str]:
        out = cluster.run("squeue", "-h", "-t", states, "-o", "%i %j").split("\n")
        return [line for line in out if line.strip()]

    # scancel returns once Slurm took the request: none of the replay's jobs waits or runs
    # any more; a cancelled running job may stay COMPLETING a moment (CI saw one under load)
    assert left("PD,R") == [f"{outsider} not-the-replays"]
    wait_for(
        lambda: left("PD,R,CG") == [f"{outsider} not-the-replays"],
        what="the replay's cancelled jobs to leave the queue",
    )


def test_replay_refuses_a_job_wider_than_the_cluster(tmp_path: Path) -> None:
    trace = _csv(tmp_path / "t.csv", [(0, 1, 0.0, 60.0), (7, 16, 10.0, 60.0)])
    res = subprocess.run(
        [*SLURM_EXT, "replay", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 1
    assert "job 7 asks for 16 GPUs but the cluster has 4" in res.stderr
    assert "starting a local cluster" not in res.stderr


def test_replay_says_when_slurm_does_not_answer(tmp_path: Path) -> None:
    cluster = LocalCluster(nodes=1, gpus_per_node=2, root=tmp_path / "c")
    cluster.start()
    try:
        cluster.stop_slurmctld()
        trace = _csv(tmp_path / "t.csv", [(0, 1, 0.0, 60.0)])
        res = subprocess.run(
            [*SLURM_EXT, "replay", "--trace", str(trace), "--slurm-conf", str(cluster.conf_path),
             "--partition", cluster.partition],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        cluster.stop()
    assert res.returncode == 1
    assert "Slurm does not answer" in res.stderr


def test_service_modes_refuse_a_partition_with_other_jobs(
    clean_queue: LocalCluster, tmp_path: Path
) -> None:
    cluster = clean_queue
    outsider = cluster.sbatch("--gres=gpu:1", "-J", "someone-elses", wrap="sleep 300")
    trace = _csv(tmp_path / "t.csv", [(0, 1, 0.0, 60.0)])
    res = subprocess.run(
        [*SLURM_EXT, "replay", "--trace", str(trace), "--mode", "service",
         "--slurm-conf", str(cluster.conf_path), "--partition", cluster.partition],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 1
    assert f"needs partition '{cluster.partition}' to itself" in res.stderr
    left = cluster.run("squeue", "-h", "-o", "%i %j").split("\n")
    assert [line for line in left if line.strip()] == [f"{outsider} someone-elses"]
