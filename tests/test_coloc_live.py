"""Co-location live: an opportunistic job on a gres/shard beside a guaranteed job on a real
slurmctld/slurmd, paused and resumed by a real node agent (cgroup freezer) on simulated
GPUs driven by the replay's GPU model (slurm_ext/replay/sharing.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.replay import ReplayAgents
from slurm_ext.replay.plan import plan
from slurm_ext.replay.sharing import (
    FREEZER,
    SharedCluster,
    parse_gpu_indices,
    replay_coloc,
    shared_sbatch_args,
)
from slurm_ext.sim.sharing import JobProfile
from slurm_ext.sim.traces import TraceJob

SPEEDUP = 60.0


def test_shard_args_and_gres_indices() -> None:
    jobs = [TraceJob(0, 1, 0.0, 60.0, opportunistic=True), TraceJob(1, 3, 0.0, 60.0)]
    a, b = plan(jobs, SPEEDUP, 2, 2)
    assert "--gres=shard:1" in shared_sbatch_args(a, "gpu", "/j", "shared")
    assert "--partition=opp" in shared_sbatch_args(a, "gpu", "/j", "shared")
    assert "--gres=gpu:full:1" in shared_sbatch_args(a, "gpu", "/j", "alone")
    assert "--gpus=full:3" in shared_sbatch_args(b, "gpu", "/j", "shared")
    text = (
        "   Nodes=node1 CPU_IDs=1 Mem=1000 GRES=shard:1(IDX:2)\n"
        "   Nodes=node[2-3] CPU_IDs=0-1 Mem=1000 GRES=gpu:full:2(IDX:0-1)\n"
        "   Nodes=node4 CPU_IDs=0 Mem=1000 GRES=gpu:full:2(IDX:0,3)\n"
    )
    assert parse_gpu_indices(text) == {
        "node1": [2], "node2": [0, 1], "node3": [0, 1], "node4": [0, 3],
    }  # fmt: skip


@pytest.mark.slurm
@pytest.mark.skipif(
    os.geteuid() != 0 or not Path(FREEZER).is_dir(), reason="needs root and the v1 freezer"
)
def test_opportunistic_on_shard_paused_and_resumed(tmp_path: Path) -> None:
    """1 node x 2 GPUs, 2 jobs per GPU. Two guaranteed jobs fill both GPUs (job 0
    compute-bound); the opportunistic job (compute-bound) arrives on a shard of one of
    them. Beside job 0 the agent sees it fall below 0.7 x its solo utilisation and
    freezes the newcomer until job 0 ends; beside job 1 (0.3) it may run on."""
    jobs = [
        TraceJob(0, 1, 0.0, 2400.0),
        TraceJob(1, 1, 0.0, 2400.0),
        TraceJob(2, 1, 300.0, 900.0, opportunistic=True),
    ]
    prof = {0: JobProfile(0.95, 0.3), 1: JobProfile(0.3, 0.3), 2: JobProfile(0.95, 0.2)}
    row = replay_coloc(jobs, "shared", tmp_path, SPEEDUP, SharedCluster(1, 2), prof, ReplayAgents())
    assert row["guaranteed_jobs"] == 2 and row["opportunistic_jobs"] == 1
    assert row["started_on_shard"] == 1 and row["opportunistic_sharing"] == 1
    assert row["model_errors"] == 0
    log = (tmp_path / "jobs" / "replay-2.speed.log").read_text()
    assert "start" in log and "done" in log
    if row["pauses"]:  # beside job 0: frozen, then thawed when job 0 ended
        assert row["resumes"] >= row["pauses"]
        # it ran longer than its work at full speed by at least the pause
        assert row["opportunistic_avg_jct_s"] > 900.0 + 600.0
    else:  # beside job 1: shared without a pause, slowed by the interference model
        assert row["opportunistic_avg_jct_s"] > 900.0
    assert not list(Path(FREEZER).glob("slurm_ext_replay_*")), "cgroups left behind"
