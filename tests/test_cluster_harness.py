"""The local cluster harness itself: jobs launch whatever the depth of its directory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm


def test_jobs_launch_from_a_deep_cluster_directory(tmp_path: Path) -> None:
    """slurmstepd's socket lives in the spool: under a deep root (a long pytest tmp_path)
    its path passed the 108 bytes a unix socket allows and every launch failed. munge's,
    MariaDB's and slurmdbd's sockets move with it (accounting on)."""
    root = tmp_path / ("deep-" + "d" * 60) / "cluster"
    with LocalCluster(nodes=1, gpus_per_node=1, root=root, accounting=True) as cluster:
        job = cluster.sbatch("--gres=gpu:1", wrap="true")
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = cluster.run("scontrol", "show", "job", str(job), check=False)
            if "JobState=COMPLETED" in state or "Invalid job id" in state:
                break
            time.sleep(0.5)
        assert "JobState=COMPLETED" in state, state
        assert (root / "spool").is_symlink() and (root / "munge").is_symlink()
        short = (root / "spool").resolve()
    assert not short.exists()  # the short spool goes with the cluster
