"""Free GPUs per node over time, for the backfill pass (`sim.backfill`): each node's steps
before any reservation (`NodeSteps`, which the simulator keeps across passes) and a
pass's `Profile`, the step functions with its reservations, answering when a job could
start at the earliest. Times are already rounded to `bf_resolution` by the caller.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from slurm_ext.policy import min_nodes
from slurm_ext.sim.bfany import AnyNodes

if TYPE_CHECKING:
    from slurm_ext.sim.bfinputs import Candidate

INF = math.inf


class _Lazy(dict):
    """A dict that builds a missing key's value with `build(key)` and keeps it."""

    def __init__(self, build: Callable[[str], list]) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, key: str) -> list:
        value = self[key] = self.build(key)
        return value


@dataclass(frozen=True)
class NodeSteps:
    """One node's free GPUs over time before any reservation: `frees[0]` now, then
    `frees[i]` from `ends[i - 1]` on (ends ascending, distinct). `ready[g]`: when it
    first has g GPUs free (-inf: now; inf: never), so that a node no reservation took
    (free GPUs never fall) answers an earliest-start question without a walk."""

    ends: tuple[float, ...]
    frees: tuple[int, ...]
    ready: tuple[float, ...]


def node_steps(free: int, ends: Iterable[tuple[float, int]]) -> NodeSteps:
    """A node's `NodeSteps` from its free GPUs now and (end, GPUs) of its running jobs."""
    times: list[float] = []
    frees = [free]
    for end, g in sorted(ends):
        if times and end <= times[-1]:
            frees[-1] += g
        else:
            times.append(end)
            frees.append(frees[-1] + g)
    ready, i = [], 0
    for g in range(frees[-1] + 1):
        while frees[i] < g:
            i += 1
        ready.append(-INF if i == 0 else times[i - 1])
    return NodeSteps(tuple(times), tuple(frees), tuple(ready))


class Profile:
    """Free GPUs per node over time: a step function per node, from `base` on.

    times[n][i] <= t < times[n][i + 1] has frees[n][i] GPUs free on node n (the last
    step lasts forever).
    """

    def __init__(
        self,
        base: float,
        free: Mapping[str, int],
        node_ends: Mapping[str, Iterable[tuple[float, int]]],
    ) -> None:
        """node_ends: per node, (end, GPUs) of each running job there (ends rounded)."""
        self._setup(base, {n: node_steps(free[n], node_ends[n]) for n in free})

    @classmethod
    def from_steps(cls, base: float, steps: Mapping[str, NodeSteps]) -> Profile:
        """The profile from each node's `node_steps` (which a caller may keep across
        passes: they change only when a job starts or ends on the node)."""
        p = cls.__new__(cls)
        p._setup(base, steps)
        return p

    def _setup(self, base: float, steps: Mapping[str, NodeSteps]) -> None:
        self.base = base
        self.nodes = list(steps)
        self.pos = {n: i for i, n in enumerate(self.nodes)}
        # single-node earliest starts per (GPUs, length), per node; `changed` logs the
        # nodes reserved since (a reservation only delays a node's earliest start)
        self.changed: list[int] = []
        self.touched: set[int] = set()  # nodes reserved in this profile (set of `changed`)
        self.cache: dict[tuple[int, float, float], tuple[list[float], int, float, int]] = {}
        # the same for multi-node jobs: (start, GPUs) per (GPUs, length)
        self.multi: dict[tuple[int, float, float], tuple[tuple[float, list], int]] = {}
        # a node's step lists are built when first read (most passes read few nodes), by
        # functions of the steps and base alone: a bound method here was a reference cycle
        # per pass, for the garbage collector to find
        self.steps = steps
        self.times: dict[str, list[float]] = _Lazy(partial(_times, steps, base))
        self.frees: dict[str, list[int]] = _Lazy(partial(_frees, steps, base))
        self.ready: list[tuple[float, ...]] = [st.ready for st in steps.values()]
        # the untouched nodes' answers, per (GPUs, before): `_single_earliest`, `_earliest_nodes`
        self.ready_at: dict[tuple[int, float], list[float]] = {}
        self.opens_at: dict[tuple[int, float], list[tuple[float, int, int]]] = {}
        # for jobs that may take any nodes, once one asks; then kept up by `reserve`
        self.any: AnyNodes | None = None

    def window_min(self, node: str, start: float, end: float) -> int:
        """Fewest GPUs free on `node` at any moment of [start, end)."""
        times, frees = self.times[node], self.frees[node]
        i = bisect_right(times, start) - 1
        j = bisect_left(times, end)
        return min(frees[max(i, 0) : max(j, i + 1)])

    def node_earliest(self, node: str, gpus: int, length: float, before: float) -> float:
        """Earliest step start (< before) from which `node` keeps `gpus` free for `length`;
        INF if none."""
        times, frees = self.times[node], self.frees[node]
        k = len(times)
        i = 0
        while i < k and times[i] < before:
            if frees[i] >= gpus:
                end = times[i] + length
                j = i + 1
                while j < k and times[j] < end and frees[j] >= gpus:
                    j += 1
                if j == k or times[j] >= end:
                    return times[i]
                i = j + 1  # step j has too few: no start before it can span it
            else:
                i += 1
        return INF

    def earliest(
        self, c: Candidate, capacity: int, length: float, before: float
    ) -> tuple[float, list[tuple[str, int]]]:
        """The job's earliest start before `before` and the GPUs it would hold then."""
        if c.consolidate and c.gpus <= capacity:
            key = (c.gpus, length, before)
            hit = self.cache.get(key)
            nodes = self.nodes
            if hit is None:
                vals = self._single_earliest(c.gpus, length, before)
                best = min(vals)
                at = vals.index(best)  # ties: the first node
            else:
                # the (earliest, node) minimum is kept: only the nodes reserved since
                # change, so it is theirs or, unless its own node changed, the old one
                vals, seen, best, at = hit
                changed = set(self.changed[seen:])
                for p in changed:
                    vals[p] = self.node_earliest(nodes[p], c.gpus, length, before)
                if at in changed:
                    best = min(vals)
                    at = vals.index(best)
                else:
                    for p in changed:
                        if vals[p] < best or (vals[p] == best and p < at):
                            best, at = vals[p], p
            self.cache[key] = (vals, len(self.changed), best, at)
            if best == INF:
                return INF, []
            return best, [(nodes[at], c.gpus)]
        if c.consolidate:
            # still right if no reservation since took one of its nodes: a reservation
            # only delays the nodes it takes
            key = (c.gpus, length, before)
            hit = self.multi.get(key)
            if hit is not None:
                (t, alloc), seen = hit
                if {self.pos[n] for n, _ in alloc}.isdisjoint(self.changed[seen:]):
                    return t, alloc
            out = self._earliest_nodes(c.gpus, min_nodes(c.gpus, capacity), length, before)
            self.multi[key] = (out, len(self.changed))
            return out
        if self.any is None:  # a job that may take GPUs on any nodes (sim/bfany.py)
            self.any = AnyNodes([(self.times[n], self.frees[n]) for n in self.nodes])
        return self.any.earliest(self.nodes, self.times, self.frees, c.gpus, length, before)

    def _single_earliest(self, gpus: int, length: float, before: float) -> list[float]:
        """`node_earliest` of every node; a node no reservation took has free GPUs that
        never fall, so its answer is when it first has `gpus` free (`NodeSteps.ready`),
        whatever the length: those answers are kept per (GPUs, before) for the pass
        (`ready_at`), and only the reserved nodes are walked for each length."""
        vals = self.ready_at.get((gpus, before))
        if vals is None:
            base, vals = self.base, []
            for r in self.ready:
                t = r[gpus] if gpus < len(r) else INF
                if t < base:
                    t = base
                vals.append(t if t < before else INF)
            self.ready_at[(gpus, before)] = vals
        vals = vals.copy()
        nodes = self.nodes
        for p in self.touched:
            vals[p] = self.node_earliest(nodes[p], gpus, length, before)
        return vals

    def _earliest_nodes(
        self, gpus: int, m: int, length: float, before: float
    ) -> tuple[float, list[tuple[str, int]]]:
        """A multi-node consolidated job's earliest start: m nodes that each keep an even
        share, ceil(gpus / m), free for `length` from a common start (a sweep over each
        node's runs of enough free GPUs)."""
        share = -(-gpus // m)
        # (time, 0: opens / 1: closes, node); a node no reservation took has free GPUs
        # that never fall: one run from `ready` on that never closes, the same for every
        # length, so kept per (share, before) for the pass, sorted (`opens_at`)
        opens = self.opens_at.get((share, before))
        if opens is None:
            base, opens = self.base, []
            for pos, r in enumerate(self.ready):
                t = r[share] if share < len(r) else INF
                if t < base:
                    t = base
                if t < before:
                    opens.append((t, 0, pos))
            opens.sort()
            self.opens_at[(share, before)] = opens
        touched = self.touched
        events = [e for e in opens if e[2] not in touched] if touched else opens.copy()
        for pos in touched:
            n = self.nodes[pos]
            times, frees = self.times[n], self.frees[n]
            k, i = len(times), 0
            while i < k and times[i] < before:
                if frees[i] < share:
                    i += 1
                    continue
                j = i + 1
                while j < k and frees[j] >= share:
                    j += 1
                run_end = times[j] if j < k else INF
                last = INF if run_end == INF else run_end - length  # latest start in the run
                if last >= times[i]:
                    events.append((times[i], 0, pos))
                    events.append((last, 1, pos))
                i = j
        events.sort()
        open_nodes: set[int] = set()
        for t, kind, pos in events:
            if kind == 1:
                open_nodes.discard(pos)
                continue
            open_nodes.add(pos)
            if len(open_nodes) >= m and t < before:
                picked = sorted(open_nodes)[:m]  # node order
                alloc = [(self.nodes[p], share) for p in picked]
                alloc[-1] = (alloc[-1][0], gpus - share * (m - 1))
                return t, alloc
        return INF, []

    def reserve(self, alloc: Sequence[tuple[str, int]], start: float, end: float) -> None:
        """Take `alloc`'s GPUs over [start, end)."""
        if self.any is not None:
            self.any.take(sum(g for _, g in alloc), start, end)
        for n, g in alloc:
            p = self.pos[n]
            self.changed.append(p)
            self.touched.add(p)
            times, frees = self.times[n], self.frees[n]
            for t in (start, end):
                i = bisect_right(times, t) - 1
                if i < 0:
                    times.insert(0, t)
                    frees.insert(0, frees[0])
                elif times[i] != t:
                    times.insert(i + 1, t)
                    frees.insert(i + 1, frees[i])
            i, j = bisect_left(times, start), bisect_left(times, end)
            for k in range(i, j):
                frees[k] -= g


def _past(st: NodeSteps, base: float) -> int:
    """How many of a node's ends are at or before the base (part of its first step)."""
    ends = st.ends
    return bisect_right(ends, base) if ends and ends[0] <= base else 0


def _times(steps: Mapping[str, NodeSteps], base: float, node: str) -> list[float]:
    st = steps[node]
    return [base, *st.ends[_past(st, base) :]]


def _frees(steps: Mapping[str, NodeSteps], base: float, node: str) -> list[int]:
    st = steps[node]
    return list(st.frees[_past(st, base) :])
