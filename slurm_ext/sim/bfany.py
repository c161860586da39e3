"""The backfill profile's earliest start for a job that may take GPUs on any nodes
(spread placement; `sim.bfprofile.Profile.earliest` asks `AnyNodes`).

Such a job can start at a step start s (< the window's end) if the nodes' fewest free
GPUs over [s, s + length) add up to its GPUs; it takes them from the nodes offering
most. Asking `Profile.window_min` for every node at every step start, over step lists
that grow with each reservation, made a pass quadratic in its reservations (48 CPU s
for 10,000 jobs on 64 GPUs under spread placement). Here each node's fewest is a sliding
minimum, a start is tried on the nodes only if all nodes' free GPUs together allow it,
and a shape starts from its last answer in the pass. The same answers:
tests/test_sim_backfill_exact.py checks them against `window_min` at every start.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Mapping

INF = math.inf


class AnyNodes:
    """One pass's view for any-node jobs: every node's step times (`starts`), all nodes'
    free GPUs together as one step function (`times`, `frees`, from -inf; each node's
    first step counts from -inf, as `window_min` clamps a start before it), both kept up
    with the pass's reservations (`take`), and each (GPUs, length)'s last answer."""

    def __init__(self, steps: list[tuple[list[float], list[int]]]) -> None:
        """steps: each node's (times, frees), in node order."""
        delta: dict[float, int] = {}
        for times, frees in steps:
            for i in range(1, len(times)):
                delta[times[i]] = delta.get(times[i], 0) + frees[i] - frees[i - 1]
        self.times, self.frees = [-INF], [sum(frees[0] for _, frees in steps)]
        for t in sorted(delta):
            self.times.append(t)
            self.frees.append(self.frees[-1] + delta[t])
        self.starts = sorted({t for times, _ in steps for t in times})
        self.last: dict[tuple[int, float], float] = {}

    def take(self, gpus: int, start: float, end: float) -> None:
        """A reservation of `gpus` GPUs (on any nodes) over [start, end)."""
        starts, times, frees = self.starts, self.times, self.frees
        for t in (start, end):
            k = bisect_left(starts, t)
            if k == len(starts) or starts[k] != t:
                starts.insert(k, t)
            i = bisect_right(times, t) - 1
            if times[i] != t:
                times.insert(i + 1, t)
                frees.insert(i + 1, frees[i])
        for k in range(bisect_left(times, start), bisect_left(times, end)):
            frees[k] -= gpus

    def earliest(
        self,
        nodes: list[str],
        node_times: Mapping[str, list[float]],
        node_frees: Mapping[str, list[int]],
        gpus: int,
        length: float,
        before: float,
    ) -> tuple[float, list[tuple[str, int]]]:
        """The first step start (< before) from which the nodes' fewest free GPUs over
        [start, start + length) add up to `gpus`, and its GPUs from the nodes offering
        most (node order among equals); (inf, []) if none. A start is tried on the nodes
        only if all nodes together keep `gpus` free over the window (the sum of the
        nodes' minima is at most the minimum of their sum)."""
        starts = self.starts
        total = SlidingMin(self.times, self.frees)
        per_node: list[SlidingMin] = []  # made at the first start the total allows
        # none before this shape's last answer: a start it passed over had too few GPUs,
        # and reservations since only take some; a start they added in between offered
        # no more then than the start before it (no node's steps change between the two,
        # and its window reaches further), so no more now
        first = bisect_left(starts, self.last.get((gpus, length), -INF))
        for s in starts[first : bisect_left(starts, before)]:
            end = s + length
            if total.fewest(s, end) < gpus:
                continue
            if not per_node:
                per_node = [SlidingMin(node_times[n], node_frees[n]) for n in nodes]
            offers = [m.fewest(s, end) for m in per_node]
            if sum(offers) >= gpus:
                self.last[(gpus, length)] = s
                ranked = sorted(zip(offers, nodes), key=lambda o: -o[0])  # stable: node order
                alloc, left = [], gpus
                for o, n in ranked:
                    if left <= 0 or o <= 0:
                        break
                    alloc.append((n, min(o, left)))
                    left -= alloc[-1][1]
                return s, alloc
        self.last[(gpus, length)] = before
        return INF, []


class SlidingMin:
    """The fewest free GPUs of a step function (times ascending, frees) over windows
    [start, end) whose start and end never move back: a deque of the steps in the
    window with increasing free GPUs, so each step enters and leaves once. The same
    value as `Profile.window_min` (a start before the first step counts from it)."""

    __slots__ = ("times", "frees", "lo", "hi", "dq")

    def __init__(self, times: list[float], frees: list[int]) -> None:
        self.times, self.frees = times, frees
        self.lo = self.hi = 0  # the step under the start; the first step not yet in
        self.dq: deque[int] = deque()

    def fewest(self, start: float, end: float) -> int:
        times, frees, dq = self.times, self.frees, self.dq
        k, h = len(times), self.hi
        while h < k and (h == 0 or times[h] < end):  # steps that begin before `end` enter
            f = frees[h]
            while dq and frees[dq[-1]] >= f:
                dq.pop()
            dq.append(h)
            h += 1
        self.hi = h
        i = self.lo
        while i + 1 < k and times[i + 1] <= start:
            i += 1
        self.lo = i
        while dq[0] < i:  # steps that ended by the start leave
            dq.popleft()
        return frees[dq[0]]
