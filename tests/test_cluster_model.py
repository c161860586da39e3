"""The cluster model's helpers (core.model.Cluster): which nodes a job may use."""

from __future__ import annotations

from slurm_ext.core.model import Cluster, Node, Partition


def cluster() -> Cluster:
    nodes = (
        Node("a1", gpus=4, gpu_type="a100", features=("a100", "ib"), partitions=("a100",)),
        Node("a2", gpus=4, gpu_type="a100", features=("a100",), partitions=("a100", "debug")),
        Node("h1", gpus=8, gpu_type="h100", features=("h100", "ib"), partitions=("h100",)),
        Node("h2", gpus=8, gpu_type="h100", state="DOWN", partitions=("h100", "debug")),
        Node("c1", cpus=128, partitions=("cpu",)),
        Node("g1", gpus=2, partitions=("debug",)),  # untyped GPUs
    )
    parts = (
        Partition("a100", ("a1", "a2"), 86400.0, default=True),
        Partition("h100", ("h1", "h2"), 43200.0),
        Partition("debug", ("a2", "h2", "g1", "gone"), 1800.0),  # a node not in the list
        Partition("cpu", ("c1",)),
    )
    return Cluster(nodes=nodes, partitions=parts)


def names(nodes: tuple[Node, ...]) -> list[str]:
    return [n.name for n in nodes]


def test_nodes_and_gpu_types_of_a_partition() -> None:
    c = cluster()
    assert names(c.partition_nodes("debug")) == ["a2", "h2", "g1"]
    assert c.partition_nodes("nope") == ()
    assert c.gpu_types("debug") == ("a100", "h100")
    assert c.gpu_types("cpu") == ()
    assert c.node("h1") is c.nodes[2] and c.node("gone") is None
    assert c.partition("h100").max_time_s == 43200.0 and c.partition("x") is None


def test_eligible_nodes_by_partition_type_features_and_exclusions() -> None:
    c = cluster()
    # no partition named: the default one
    assert names(c.eligible_nodes()) == ["a1", "a2"]
    assert names(c.eligible_nodes(["h100", "debug"], gpu_type="h100")) == ["h1", "h2"]
    assert names(c.eligible_nodes(["a100", "debug"], features=["ib"])) == ["a1"]
    assert names(c.eligible_nodes(["a100", "h100"], features=["ib"], excluded=["a1"])) == ["h1"]
    # a node in two of the partitions comes once, where first met
    assert names(c.eligible_nodes(["debug", "a100"])) == ["a2", "h2", "g1", "a1"]
    assert names(c.eligible_nodes(["debug"], gpus_per_node=4)) == ["a2", "h2"]
    # untyped GPUs have no type to match
    assert names(c.eligible_nodes(["debug"], gpu_type="a100")) == ["a2"]
    assert c.eligible_nodes(["cpu"], gpu_type="a100") == ()
    # state is not the helper's business: h2 is DOWN and still a node the job may use
    assert not c.node("h2").schedulable


def test_no_default_partition_and_no_partition_named_means_no_nodes() -> None:
    c = Cluster(nodes=(Node("n1"),), partitions=(Partition("p", ("n1",)),))
    assert c.default_partition is None and c.eligible_nodes() == ()


def test_a_cluster_is_a_plain_value() -> None:
    a, b = cluster(), cluster()
    a.node("a1")  # the name index is a cache, not part of the value
    assert a == b and hash(a) == hash(b)
