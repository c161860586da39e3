"""Consolidation-aware placement: which nodes a G-GPU job should get.

Scoring follows Tiresias: fewest nodes, then best fit (fewest free GPUs left stranded on
the touched nodes), then one switch. The core, `choose_gpus`, works on a FreeIndex (nodes
bucketed by free GPUs) so the simulator can call it per event in O(GPUs per node);
`place` wraps it for the service and ranks several candidates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurm_ext.core.model import Node, Placement
from slurm_ext.policy.profiles import network_sensitive as _sensitive

MODES = ("consolidate", "spread", "profile")


class FreeIndex:
    """Nodes bucketed by free GPU count; buckets keep insertion order (deterministic)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buckets: list[dict[str, None]] = [{} for _ in range(capacity + 1)]
        self.free: dict[str, int] = {}
        self.total_free = 0

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node]) -> FreeIndex:
        cap = max((n.gpus for n in nodes), default=0)
        idx = cls(cap)
        for n in nodes:
            idx.set(n.name, n.gpus_free)
        return idx

    def set(self, name: str, free: int) -> None:
        old = self.free.get(name)
        if old is not None:
            del self.buckets[old][name]
            self.total_free -= old
        self.free[name] = free
        self.buckets[free][name] = None
        self.total_free += free

    def take(self, alloc: Sequence[tuple[str, int]]) -> None:
        for name, g in alloc:
            self.set(name, self.free[name] - g)

    def give(self, alloc: Sequence[tuple[str, int]]) -> None:
        for name, g in alloc:
            self.set(name, self.free[name] + g)


def min_nodes(gpus: int, capacity: int) -> int:
    return max(1, math.ceil(gpus / capacity)) if capacity else 0


def cpu_limited(idx: FreeIndex, free_cpus: Mapping[str, int], cpus_per_gpu: int) -> FreeIndex:
    """The GPUs each node can actually feed: min(free GPUs, free cores // cores per GPU).

    A node with idle GPUs but its cores taken cannot host a job that needs cores, so
    placement sees it as full. Nodes keep their order within each free count.
    """
    out = FreeIndex(idx.capacity)
    for f, bucket in enumerate(idx.buckets):
        for name in bucket:
            out.set(name, min(f, free_cpus[name] // cpus_per_gpu))
    return out


def choose_gpus(
    idx: FreeIndex,
    gpus: int,
    consolidate: bool,
    cpus: tuple[Mapping[str, int], int] | None = None,
) -> list[tuple[str, int]] | None:
    """Fewest nodes (largest free first), last node best fit; None if it cannot fit.

    consolidate: only accept the minimum possible number of nodes (wait otherwise).
    cpus: (free cores per node, cores per GPU) when cores count too: a node then offers
    only the GPUs its free cores can feed (`cpu_limited`); None: GPUs only.
    """
    if gpus <= 0 or idx.total_free < gpus:
        return None
    if cpus is not None:
        idx = cpu_limited(idx, *cpus)
        if idx.total_free < gpus:
            return None
    alloc: list[tuple[str, int]] = []
    used: set[str] = set()
    remaining = gpus
    cap = idx.capacity
    most = min_nodes(gpus, cap)
    while remaining > 0:
        best_fit = (
            _first(idx, range(min(remaining, cap + 1), cap + 1), used) if remaining <= cap else None
        )
        if best_fit is not None:
            alloc.append((best_fit, remaining))
            break
        if consolidate and len(alloc) + 1 >= most:
            return None  # a largest node leaves some to place: more than `most` nodes
        largest = _first(idx, range(cap, 0, -1), used)
        if largest is None:
            return None
        g = idx.free[largest]
        alloc.append((largest, g))
        used.add(largest)
        remaining -= g
    return alloc


def _first(idx: FreeIndex, frees: range, used: set[str]) -> str | None:
    for f in frees:
        for name in idx.buckets[f]:
            if name not in used:
                return name
    return None


def consolidate_for(mode: str, sensitive: bool, per_node_request: bool = False) -> bool:
    """Whether a job starts only on the fewest nodes: the placement mode says so, or its
    request does (`per_node_request`: it asks G GPUs on each of its N nodes and N is the
    fewest that hold them, so Slurm can place it no other way, whatever the mode)."""
    if mode not in MODES:
        raise ValueError(f"placement mode must be one of {MODES}, got {mode!r}")
    return per_node_request or mode == "consolidate" or (mode == "profile" and sensitive)


def asks_fewest_nodes(gpus: int, gpus_per_node: int, num_nodes: int, capacity: int) -> bool:
    """A per-node GPU request (`--gres=gpu:G -N N`) on the fewest nodes that hold it: Slurm
    starts it only where G GPUs are free on each of N nodes. A per-job request
    (`--gpus=N`, gpus_per_node 0) may be spread; the service's placement hints rely on it."""
    return (
        gpus > 0
        and gpus_per_node > 0
        and num_nodes * gpus_per_node == gpus
        and num_nodes == min_nodes(gpus, capacity)
    )


def place(
    job_id: int,
    gpus: int,
    nodes: Sequence[Node],
    mode: str = "consolidate",
    network_sensitive: bool = True,
    max_candidates: int = 5,
    model_tag: str | None = None,
) -> list[Placement]:
    """Candidate node sets for a pending job, best first ([] if it must wait).

    consolidate: minimum node count only; spread: any node set; profile: consolidate
    network-sensitive models (or `model_tag` per the profile table), spread the others.
    """
    sensitive = network_sensitive if model_tag is None else _sensitive(model_tag)
    consolidate = consolidate_for(mode, sensitive)
    usable = [n for n in nodes if n.gpus_free > 0]
    if not usable:
        return []
    switch = {n.name: n.switch for n in usable}
    cap = max(n.gpus for n in nodes)
    groups: dict[str | None, list[Node]] = {}
    for n in usable:
        groups.setdefault(n.switch, []).append(n)
    seen: set[tuple[str, ...]] = set()
    cands: list[list[tuple[str, int]]] = []
    pools = [usable] + (list(groups.values()) if len(groups) > 1 else [])
    for pool in pools:
        idx = FreeIndex(cap)
        for n in pool:
            idx.set(n.name, n.gpus_free)
        alloc = choose_gpus(idx, gpus, consolidate)
        if alloc is not None:
            cands.append(alloc)
        if gpus <= cap:  # alternatives: every other node that fits alone, best fit first
            for f in range(gpus, cap + 1):
                cands.extend([(name, gpus)] for name in idx.buckets[f])
    free = {n.name: n.gpus_free for n in usable}
    out: list[Placement] = []
    for alloc in cands:
        names = tuple(sorted(name for name, _ in alloc))
        if names in seen:
            continue
        seen.add(names)
        out.append(_score(job_id, gpus, alloc, free, switch, cap))
    out.sort(key=lambda p: -p.score)  # stable: the core choice leads among equals
    return out[:max_candidates]


def _score(
    job_id: int,
    gpus: int,
    alloc: list[tuple[str, int]],
    free: dict[str, int],
    switch: dict[str, str | None],
    cap: int,
) -> Placement:
    extra_nodes = len(alloc) - min_nodes(gpus, cap)
    leftover = sum(free[name] - g for name, g in alloc)
    switches = len({switch[name] for name, _ in alloc})
    score = 1000.0 - 100.0 * extra_nodes - 10.0 * (switches - 1) - leftover
    return Placement(
        job_id=job_id,
        nodes=tuple(name for name, _ in alloc),
        score=score,
        detail={
            "nodes": float(len(alloc)),
            "extra_nodes": float(extra_nodes),
            "leftover_gpus": float(leftover),
            "switches": float(switches),
        },
    )


def fragmentation(nodes: Sequence[Node]) -> float:
    """Share of free GPUs stranded on partly used nodes (0 = all free GPUs on idle nodes).

    A free GPU on a half-busy node cannot host a whole-node job; the higher this is, the
    more large jobs wait although enough GPUs are free in total.
    """
    usable = [n for n in nodes if n.schedulable and n.gpus > 0]
    total = sum(n.gpus_free for n in usable)
    if total == 0:
        return 0.0
    stranded = sum(n.gpus_free for n in usable if 0 < n.gpus_free < n.gpus)
    return stranded / total
