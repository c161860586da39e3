"""The cluster model from what live Slurm 22.05 and 25.11 said of a heterogeneous cluster
(recorded by `python -m slurm_ext.testing.record_cluster`, tests/data/hetero_*): both
backends' mappings, checked against that cluster's own slurm.conf read by site_conf."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_ext.core.model import Cluster, Node, Partition
from slurm_ext.slurm.cli_backend import node_from_sinfo, partition_from_scontrol
from slurm_ext.slurm.pyslurm_mapping import node_from_pyslurm, partition_from_pyslurm
from slurm_ext.slurm.site_conf import read_site_conf

DATA = Path(__file__).parent / "data"
VERSIONS = ["22.05", "25.11"]


def described(node: Node) -> tuple:
    """What slurm.conf says of a node (its state and allocations are the live Slurm's)."""
    return (
        node.name,
        node.cpus,
        node.gpus,
        node.gpu_type,
        node.memory_mb,
        node.weight,
        node.features,
        node.partitions,
    )


def cli_cluster(version: str) -> Cluster:
    text = (DATA / f"hetero_partitions_{version}_recorded.txt").read_text()
    parts = tuple(partition_from_scontrol(line) for line in text.splitlines() if line.strip())
    records = json.loads((DATA / f"hetero_nodes_{version}_recorded.json").read_text())["nodes"]
    return Cluster(nodes=tuple(node_from_sinfo(r) for r in records), partitions=parts)


def pyslurm_cluster() -> Cluster:
    data = json.loads((DATA / "hetero_pyslurm_25.11_recorded.json").read_text())
    parts = tuple(partition_from_pyslurm(SimpleNamespace(**p)) for p in data["partitions"])
    nodes = tuple(node_from_pyslurm(SimpleNamespace(**n)) for n in data["nodes"])
    return Cluster(nodes=nodes, partitions=parts)


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_backend_reads_typed_gpus_and_partitions(version: str) -> None:
    cluster = cli_cluster(version)
    assert cluster.partitions == (
        Partition("a100", ("a100-1", "a100-2"), 2 * 3600.0, True, "UP"),
        Partition("h100", ("h100-1", "h100-2"), 86400.0, False, "UP"),
    )
    a100, h100 = cluster.node("a100-2"), cluster.node("h100-1")
    assert a100 is not None and h100 is not None
    assert (a100.gpus, a100.gpu_type, a100.features, a100.weight) == (4, "a100", ("a100", "ib"), 1)
    assert (h100.gpus, h100.gpu_type, h100.features, h100.weight) == (8, "h100", (), 10)
    assert (h100.cpus, h100.memory_mb, h100.partitions) == (16, 64000, ("h100",))
    # the two recorded 2-GPU jobs ran on h100-1 (the QOS held the third back)
    assert h100.gpus_alloc == 4 and cluster.node("a100-1").gpus_alloc == 0
    assert cluster.gpu_types("h100") == ("h100",)
    assert [n.name for n in cluster.eligible_nodes(gpu_type="a100", features=["ib"])] == [
        "a100-1",
        "a100-2",
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_live_model_matches_the_clusters_slurm_conf(version: str) -> None:
    """site_conf reads the harness's slurm.conf into the model the live Slurm gave."""
    conf = read_site_conf(DATA / f"hetero_slurm_{version}_recorded.conf")
    live = cli_cluster(version)
    assert conf.cluster.partitions == live.partitions
    assert [described(n) for n in conf.cluster.nodes] == [described(n) for n in live.nodes]
    assert conf.cluster_name == "slurmext"


def test_pyslurm_mapping_gives_the_cli_model() -> None:
    py, cli = pyslurm_cluster(), cli_cluster("25.11")
    assert py.partitions == cli.partitions
    assert [described(n) for n in py.nodes] == [described(n) for n in cli.nodes]
    assert [n.gpus_alloc for n in py.nodes] == [n.gpus_alloc for n in cli.nodes]


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_truth_says_what_sinfo_and_squeue_said(version: str) -> None:
    truth = json.loads((DATA / f"hetero_truth_{version}_recorded.json").read_text())
    assert truth["sinfo"] == ["a100* gpu:a100:4 2:00:00", "h100 gpu:h100:8 1-00:00:00"]
    states = [j["squeue"].split("|")[:2] for j in truth["jobs"].values()]
    # both releases spell the QOS's per-user GPU cap alike
    assert states == [["RUNNING", "None"], ["RUNNING", "None"], ["PENDING", "QOSMaxGRESPerUser"]]


@pytest.mark.parametrize(
    ("gres", "gpus", "gpu_type"),
    [
        ("gpu:h100:8(S:0-1)", 8, "h100"),
        ("gpu:a100:4(S:0),shard:16", 4, "a100"),
        ("gpu:4", 4, None),
        ("(null)", 0, None),
    ],
)
def test_node_gres_spellings(gres: str, gpus: int, gpu_type: str | None) -> None:
    node = node_from_sinfo({"name": "n1", "gres": gres, "state": "idle", "weight": 7})
    assert (node.gpus, node.gpu_type, node.weight) == (gpus, gpu_type, 7)


def test_partition_line_edge_cases() -> None:
    line = "PartitionName=empty Default=NO MaxTime=UNLIMITED Nodes=(null) State=INACTIVE"
    assert partition_from_scontrol(line) == Partition("empty", (), None, False, "INACTIVE")
    with pytest.raises(KeyError):
        partition_from_scontrol("Nodes=n1 MaxTime=1")  # no name: the backend skips it
    with pytest.raises(ValueError, match="MaxTime"):
        partition_from_scontrol("PartitionName=p MaxTime=later")
