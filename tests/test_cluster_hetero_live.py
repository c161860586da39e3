"""A heterogeneous LocalCluster on Slurm 22.05 and 25.11: A100 and H100 nodes in a
partition each (each its own MaxTime), typed GPUs, accounting with a QOS of 4 GPUs per
user; and both backends' `cluster()` read from it. One cluster per release, shared by the
tests of this module (testing/record_cluster.py's HETEROGENEOUS, the recorded one)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import wait_for

from slurm_ext.slurm import CliSlurmClient
from slurm_ext.slurm.site_conf import read_site_conf
from slurm_ext.testing.cluster import ClusterError, LocalCluster

pytestmark = pytest.mark.slurm


def squeue(cluster: LocalCluster, job: int) -> list[str]:
    """[state, reason, nodes, qos] of one job, as squeue prints them."""
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T|%r|%N|%q").strip().split("|")


def test_sinfo_shows_both_partitions_with_typed_gpus(empty: LocalCluster) -> None:
    lines = empty.run("sinfo", "-h", "-o", "%P %G %l %D").splitlines()
    assert lines == ["a100* gpu:a100:4 2:00:00 2", "h100 gpu:h100:8 1-00:00:00 2"]


def test_typed_request_runs_on_a_node_of_that_type(empty: LocalCluster) -> None:
    job = empty.sbatch("-p", "h100", "--gres=gpu:h100:2", wrap="sleep 120")
    state = wait_for(
        lambda: (s := squeue(empty, job))[0] == "RUNNING" and s, what=f"job {job} to run"
    )
    assert state[2] in ("h100-1", "h100-2") and state[3] == "gpu16"
    # a type the partition does not have is refused at submission
    with pytest.raises(ClusterError, match="Requested node configuration is not available"):
        empty.sbatch("-p", "a100", "--gres=gpu:h100:1")


def test_a_job_past_the_qos_gpu_cap_pends(empty: LocalCluster) -> None:
    """4 GPUs per user: with 4 held, one more GPU in any partition waits, and squeue says
    why in the same words on 22.05 and 25.11."""
    first = empty.sbatch("-p", "h100", "--gres=gpu:h100:4", wrap="sleep 120")
    wait_for(lambda: squeue(empty, first)[0] == "RUNNING", what="the first job to run")
    second = empty.sbatch("-p", "a100", "--gres=gpu:a100:1", wrap="sleep 120")
    state = wait_for(
        lambda: (s := squeue(empty, second))[1] == "QOSMaxGRESPerUser" and s,
        what="the QOS reason",
    )
    assert state[0] == "PENDING"
    empty.run("scancel", str(first))
    wait_for(lambda: squeue(empty, second)[0] == "RUNNING", what="the second job to run")


def test_both_backends_read_the_clusters_own_description(empty: LocalCluster) -> None:
    cli = CliSlurmClient(slurm_conf=str(empty.conf_path), timeout=20, bin_dir=empty.bin_dir)
    wait_for(lambda: all(n.state == "IDLE" for n in cli.nodes()), what="idle nodes")
    live = cli.cluster()
    conf = read_site_conf(empty.conf_path).cluster
    assert live.partitions == conf.partitions
    assert [dataclasses.replace(n, state="") for n in live.nodes] == [
        dataclasses.replace(n, state="") for n in conf.nodes
    ]
    assert live.gpu_types("h100") == ("h100",)
    assert [n.name for n in live.eligible_nodes(gpu_type="a100", features=["ib"])] == [
        "a100-1",
        "a100-2",
    ]
    if empty.version < (25, 11) or importlib.util.find_spec("pyslurm") is None:
        return
    # pyslurm reads one slurm.conf per process, and this cluster's is not the session's
    script = (
        "import dataclasses, json, sys\n"
        "from slurm_ext.slurm.pyslurm_backend import PySlurmClient\n"
        "c = PySlurmClient(slurm_conf=sys.argv[1], bin_dir=sys.argv[2])\n"
        "print(json.dumps(dataclasses.asdict(c.cluster())))\n"
    )
    argv = [sys.executable, "-c", script, str(empty.conf_path), str(empty.bin_dir)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(json.dumps(dataclasses.asdict(live)))
