"""Placement choices and fragmentation, checked by hand."""

import random

import pytest

from slurm_ext.core.model import Node
from slurm_ext.policy import FreeIndex, choose_gpus, fragmentation, place


def nodes(*free, cap=8, switch=None):
    return [
        Node(name=f"n{i}", gpus=cap, gpus_alloc=cap - f, switch=switch(i) if switch else None)
        for i, f in enumerate(free)
    ]


def test_single_node_best_fit():
    ns = nodes(8, 3, 5, 2)
    p = place(1, 2, ns)
    assert p[0].nodes == ("n3",)  # exactly 2 free: no leftover
    assert [c.nodes for c in p] == [("n3",), ("n1",), ("n2",), ("n0",)]
    assert p[0].detail["leftover_gpus"] == 0 and p[1].detail["leftover_gpus"] == 1


def test_consolidate_waits_spread_splits():
    ns = nodes(3, 3, 2)
    assert place(1, 4, ns, mode="consolidate") == []
    p = place(1, 4, ns, mode="spread")
    assert p[0].nodes == ("n0", "n2") and p[0].detail["extra_nodes"] == 1  # n2 leaves 1, n1 2


def test_profile_rule_consolidates_only_sensitive_models():
    ns = nodes(3, 3)
    assert place(1, 4, ns, mode="profile", model_tag="vgg16") == []
    assert place(1, 4, ns, mode="profile", model_tag="resnet50")[0].nodes == ("n0", "n1")
    assert place(1, 4, ns, mode="profile", network_sensitive=False) != []


def test_multi_node_job_takes_whole_nodes_and_prefers_one_switch():
    ns = nodes(8, 4, 8, 8, switch=lambda i: "s0" if i < 2 else "s1")
    p = place(1, 16, ns, mode="consolidate")
    assert set(p[0].nodes) == {"n2", "n3"} and p[0].detail["switches"] == 1
    assert all(c.detail["nodes"] == 2 for c in p)


def test_place_top_choice_equals_core_on_a_flat_cluster():
    rng = random.Random(3)
    for _ in range(200):
        ns = nodes(*[rng.randint(0, 8) for _ in range(12)])
        g = rng.choice([1, 2, 3, 4, 8, 12, 16])
        for mode in ("consolidate", "spread"):
            p = place(1, g, ns, mode=mode)
            core = choose_gpus(FreeIndex.from_nodes(ns), g, consolidate=mode == "consolidate")
            if core is None:
                assert p == []
            else:
                assert p[0].nodes == tuple(n for n, _ in core)
                assert sum(t for _, t in core) == g


def test_fragmentation():
    assert fragmentation(nodes(8, 8)) == 0.0
    assert fragmentation(nodes(8, 4, 0)) == pytest.approx(4 / 12)
    assert fragmentation(nodes(0, 0)) == 0.0
    down = [Node(name="d", gpus=8, state="DOWN")]
    assert fragmentation(nodes(2) + down) == 1.0
