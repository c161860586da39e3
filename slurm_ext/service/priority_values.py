"""Turning a ranked order into Slurm priority values with as few writes as possible.

Slurm starts pending jobs by priority, so the service only needs values that decrease
along the policy's order. Jobs whose current values already respect that order (the
longest such subsequence) keep them; only the others get new values, placed in the gaps
between their kept neighbours. A pass over 50,000 pending jobs where two changed rank
therefore writes about two jobs, not 50,000. Pure functions: no Slurm here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence


def _longest_decreasing(values: Sequence[int]) -> list[int]:
    """Indices of a longest strictly decreasing subsequence (O(n log n))."""
    tails: list[int] = []  # tails[k] = -value at the end of the best run of length k+1
    tail_idx: list[int] = []
    prev = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect_left(tails, -v)
        if k == len(tails):
            tails.append(-v)
            tail_idx.append(i)
        else:
            tails[k] = -v
            tail_idx[k] = i
        prev[i] = tail_idx[k - 1] if k > 0 else -1
    out, i = [], tail_idx[-1] if tail_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


def assign_values(
    order: Sequence[int], current: Mapping[int, int | None], lo: int, hi: int
) -> dict[int, int]:
    """Values in [lo, hi], strictly decreasing along `order` (job ids, best first).

    `current` holds each job's value now (None or missing: never written). Values already
    in order are kept; the rest are spread through the gaps. When a gap is too narrow, a
    window around it is relabelled, widened until it fits. Raises ValueError if the band holds
    fewer values than there are jobs.
    """
    n = len(order)
    if n == 0:
        return {}
    if hi - lo + 1 < n:
        raise ValueError(f"value band [{lo}, {hi}] is too small for {n} jobs; raise value_max")
    cand = [(i, current.get(j)) for i, j in enumerate(order)]
    cand = [(i, v) for i, v in cand if v is not None and lo <= v <= hi]
    keep = {cand[k][0]: cand[k][1] for k in _longest_decreasing([v for _, v in cand])}
    # open-ended gaps (above the first kept job, below the last) get a fixed spacing so
    # that jobs arriving at the tail do not halve the remaining room every pass
    spacing = max(1, (hi - lo) // (4 * n + 4))
    out: dict[int, int] = {}
    i = 0
    while i < n:
        if i in keep:
            out[order[i]] = keep[i]
            i += 1
            continue
        left, right = i, i
        while right < n and right not in keep:
            right += 1
        grow = 1
        while True:
            upper = out[order[left - 1]] if left > 0 else None
            lower = keep[right] if right < n else None
            vals = _fill(right - left, upper, lower, lo, hi, spacing)
            if vals is not None:
                break
            if left == 0 and right == n:
                return _even(order, lo, hi)
            # too narrow: relabel a wider window, doubling it each time (amortised cheap)
            left = max(0, left - grow)
            for _ in range(grow):
                if right < n:
                    right += 1
                    while right < n and right not in keep:
                        right += 1
            grow *= 2
        out.update(zip(order[left:right], vals))
        i = right
    return out


def _fill(
    m: int, upper: int | None, lower: int | None, lo: int, hi: int, spacing: int
) -> list[int] | None:
    top = hi + 1 if upper is None else upper
    bottom = lo - 1 if lower is None else lower
    room = top - bottom - 1
    if room < m:
        return None
    if upper is not None and lower is None and spacing * m < room:
        return [top - spacing * (k + 1) for k in range(m)]
    if upper is None and lower is not None and spacing * m < room:
        return [bottom + spacing * (m - k) for k in range(m)]
    step = (top - bottom) / (m + 1)
    vals = [top - int(round(step * (k + 1))) for k in range(m)]
    # rounding can collide on narrow gaps; fall back to consecutive values
    if len(set(vals)) < m or vals[0] >= top or vals[-1] <= bottom:
        vals = [top - 1 - k for k in range(m)]
    return vals


def _even(order: Sequence[int], lo: int, hi: int) -> dict[int, int]:
    n = len(order)
    step = (hi - lo) / max(1, n)
    return {j: hi - int(step * k) for k, j in enumerate(order)}


def changed(desired: Mapping[int, int], current: Mapping[int, int | None]) -> dict[int, int]:
    """Only the jobs whose value must be written."""
    return {j: v for j, v in desired.items() if current.get(j) != v}
