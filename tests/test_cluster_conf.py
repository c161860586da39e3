"""LocalCluster's configuration files, without starting a daemon: the homogeneous form
unchanged, the heterogeneous one (node groups) as slurm.conf readers see it."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ext.core.model import Partition
from slurm_ext.slurm.site_conf import parse_site_conf
from slurm_ext.testing import accounting
from slurm_ext.testing.cluster import LocalCluster, ephemeral_range, free_ports
from slurm_ext.testing.cluster_conf import NodeGroup, gres_conf_text, slurm_conf_text
from slurm_ext.testing.record_cluster import HETEROGENEOUS

DATA = Path(__file__).parent / "data" / "local_cluster"
ROOT = Path("/srv/c")

# The homogeneous clusters whose files tests/data/local_cluster/ holds, as the harness
# wrote them before node groups existed (same ports, paths and job_submit line)
HOMOGENEOUS = {
    "default": LocalCluster(root=ROOT),
    "shards": LocalCluster(
        nodes=2,
        gpus_per_node=2,
        shards_per_gpu=3,
        root=ROOT,
        partition="p",
        extra_conf="PriorityWeightAge=1",
    ),
    "one": LocalCluster(nodes=1, gpus_per_node=1, cpus_per_node=4, memory_mb=8000, root=ROOT),
}


def render(cluster: LocalCluster, job_submit: str = "") -> str:
    ports = list(range(7001, 7001 + len(cluster.node_names)))
    return slurm_conf_text(cluster, 6999, ports, Path("/tmp/sx"), job_submit)


@pytest.mark.parametrize("name", sorted(HOMOGENEOUS))
def test_homogeneous_files_are_what_they_were(name: str) -> None:
    cluster = HOMOGENEOUS[name]
    job_submit = "JobSubmitPlugins=lua" if name == "one" else ""
    assert render(cluster, job_submit) == (DATA / f"local_cluster_{name}.slurm.conf").read_text()
    assert gres_conf_text(cluster) == (DATA / f"local_cluster_{name}.gres.conf").read_text()


def test_node_groups_give_typed_nodes_and_a_partition_each() -> None:
    cluster = LocalCluster(root=ROOT, node_groups=HETEROGENEOUS)
    assert cluster.node_names == ["a100-1", "a100-2", "h100-1", "h100-2"]
    assert cluster.partition_names == ["a100", "h100"]
    conf = parse_site_conf(render(cluster))
    assert conf.cluster.partitions == (
        Partition("a100", ("a100-1", "a100-2"), 7200.0, True, "UP"),
        Partition("h100", ("h100-1", "h100-2"), 86400.0, False, "UP"),
    )
    a100, h100 = conf.cluster.node("a100-1"), conf.cluster.node("h100-2")
    assert (a100.gpus, a100.gpu_type, a100.features, a100.weight) == (4, "a100", ("a100", "ib"), 1)
    # no features of its own: none handed on from the group before
    assert (h100.gpus, h100.gpu_type, h100.features, h100.weight) == (8, "h100", (), 10)
    assert [(n.cpus, n.memory_mb) for n in conf.cluster.nodes] == [(16, 64000)] * 4
    assert gres_conf_text(cluster) == (
        "AutoDetect=off\n"
        "NodeName=a100-[1-2] Name=gpu Type=a100 File=/srv/c/dev/gpu[0-3]\n"
        "NodeName=h100-[1-2] Name=gpu Type=h100 File=/srv/c/dev/gpu[0-7]\n"
    )


def test_untyped_group_and_bad_groups() -> None:
    cluster = LocalCluster(root=ROOT, node_groups=[NodeGroup("gpu", count=1, gpus=2)])
    conf = parse_site_conf(render(cluster))
    assert [(n.name, n.gpus, n.gpu_type) for n in conf.cluster.nodes] == [("gpu-1", 2, None)]
    assert "Name=gpu File=" in gres_conf_text(cluster)
    with pytest.raises(ValueError, match="count and gpus"):
        NodeGroup("none", count=1, gpus=0)
    with pytest.raises(ValueError, match="shards_per_gpu"):
        render(LocalCluster(root=ROOT, node_groups=HETEROGENEOUS, shards_per_gpu=2))


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    low, _ = ephemeral_range()
    assert all(10000 <= p < low for p in ports), ports


def test_gpu_qos_makes_slurmctld_enforce_limits(tmp_path: Path) -> None:
    plain = accounting.write_files(tmp_path, tmp_path, 1, 2)
    enforcing = accounting.write_files(tmp_path, tmp_path, 1, 2, enforce=True)
    assert "AccountingStorageEnforce" not in plain
    assert enforcing == plain + "AccountingStorageEnforce=limits,qos\n"
