"""cons_tres's answer to backfill's "when could this job start?", in batches of a window.

Slurm's backfill does not search the free-GPU profile for a blocked job's earliest
start: it asks the select plugin (cons_tres's `_will_run_test`). That takes the running
jobs off in the order their time limits end, in batches, and tests the job after each
batch:

- the first batch ends at the first end rounded up past a multiple of the window (30
  wall s), plus one window; each later batch ends at that aligned time plus the window
  doubled once per failed test (empty batches are skipped, the window doubling on);
- after a batch the job is placed on the nodes cons_tres's selection prefers among
  everything freed so far (`_consec_fit`: the tightest run of consecutive nodes that
  can hold it, its first nodes or, for a one-node job, its tightest node);
- the start it reports (Slurm 25.11, `_get_last_relevant_job`) is the end of the last
  removed job on the chosen nodes, which may be earlier than the batch's end, or later
  than the job's exact earliest start on other nodes. Older releases (the 22.05 the
  replay runs, through at least 23.x) report the end of the batch's last job wherever
  it ran (`batch_start`).

So the plan is as coarse as the window at first and then doubles: at a replay's speedup
X the window is 30 x X trace seconds. `willrun_start` answers the same question on the
backfill pass's `Profile` (running jobs' ends and this pass's reservations); the pass
calls it (`coarse_start`) when `BackfillParams.willrun_window_s` > 0
(`SimConfig.bf_willrun_window_s`).
Left out: the 200-job cap per test, the 2 s time cap and licences; nodes this pass
reserved are out of a job's offers over the reservation's time only where the pass
reserves whole nodes (`BackfillParams.whole_nodes`, Slurm's own rule); the node choice
weighs free GPUs where cons_tres weighs free cores (`sim.corefit` does this for starts);
the windows are aligned on multiples of the window in trace time (live, on the
epoch's: the phase `bench_fidelity`'s ensemble draws).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from slurm_ext.policy import min_nodes

if TYPE_CHECKING:
    from slurm_ext.sim.bfinputs import Candidate
    from slurm_ext.sim.bfprofile import Profile

INF = math.inf
MAX_DOUBLINGS = 64  # Slurm stops doubling past a year; 30 s x 2^64 is far past that


def batch_ends(ends: Sequence[float], window: float) -> Iterator[float]:
    """The last running-job end of each batch cons_tres tests, in order.

    ends: the distinct, finite ends of the running jobs, ascending. The first batch
    reaches one window past the first end rounded up to the next multiple of the window
    (strictly: an end on a multiple moves up a whole window); each later one reaches the
    same aligned time plus the window doubled per test; batches with no new end are
    skipped."""
    if not ends or window <= 0:
        return
    aligned = (math.floor(ends[0] / window) + 1) * window
    span, last = window, -1
    for _ in range(MAX_DOUBLINGS):
        i = bisect_right(ends, aligned + span) - 1
        if i > last:
            last = i
            yield ends[i]
            if i == len(ends) - 1:
                return
        span *= 2


def _offers(profile: Profile, t: float, span: float) -> list[tuple[str, int]]:
    """What each node can give a job over [t, t + span) (running jobs and this pass's
    reservations), in node order."""
    return [(n, profile.window_min(n, t, t + span)) for n in profile.nodes]


def _consec_fit(
    c: Candidate, capacity: int, offers: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The job's GPUs where cons_tres's default selection puts them (`_eval_nodes_consec`
    in topology/common/eval_nodes.c); [] if they do not fit.

    It groups the nodes that can hold the job's share into runs of consecutive nodes and
    takes the tightest run large enough (fewest free resources; ties: the first), the
    first nodes of it, or for a one-node job its tightest node; if no run is large
    enough, the largest runs first. Slurm weighs free cores (one per job in a replay);
    free GPUs stand for them here. A job that may spread takes nodes in order."""
    if not c.consolidate:
        alloc, left = [], c.gpus
        for n, o in offers:
            if left <= 0:
                break
            if o > 0:
                alloc.append((n, min(o, left)))
                left -= alloc[-1][1]
        return alloc if left <= 0 else []
    m = min_nodes(c.gpus, capacity) if c.gpus > capacity else 1
    share = -(-c.gpus // m)
    runs: list[list[tuple[str, int]]] = [[]]
    for n, o in offers:
        if o >= share:
            runs[-1].append((n, o))
        elif runs[-1]:
            runs.append([])
    runs = [r for r in runs if r]
    enough = [r for r in runs if len(r) >= m]
    if enough:
        run = min(enough, key=lambda r: sum(o for _, o in r))  # first of the tightest
        picked = [min(run, key=lambda x: x[1])[0]] if m == 1 else [n for n, _ in run[:m]]
    else:
        nodes = [n for r in sorted(runs, key=len, reverse=True) for n, _ in r]
        if len(nodes) < m:
            return []
        picked = nodes[:m]
    alloc = [(n, share) for n in picked]
    alloc[-1] = (picked[-1], c.gpus - share * (m - 1))
    return alloc


def _last_end_on(profile: Profile, alloc: Sequence[tuple[str, int]], t: float) -> float:
    """The latest end of a running job, at or before t, on the chosen nodes (the "last
    relevant job"); the pass's base if none."""
    latest = profile.base
    for n, _ in alloc:
        ends = profile.steps[n].ends
        i = bisect_right(ends, t)
        if i:
            latest = max(latest, ends[i - 1])
    return latest


def _fits(profile: Profile, alloc: Sequence[tuple[str, int]], t: float, span: float) -> bool:
    return all(profile.window_min(n, t, t + span) >= g for n, g in alloc)


def willrun_start(
    profile: Profile,
    c: Candidate,
    capacity: int,
    span: float,
    before: float,
    window: float,
    exact: float,
    batch_start: bool = False,
) -> tuple[float, list[tuple[str, int]]]:
    """The start and GPUs cons_tres would report for a blocked job (module docstring).

    exact: the job's earliest start on the profile (`Profile.earliest`): no batch before
    it can hold the job, so the search starts at the first batch reaching it.
    batch_start: report the batch's last end (Slurm up to 23.x), not the last end on the
    chosen nodes (25.11). Returns (INF, []) when no batch before `before` can hold it."""
    ends = sorted({e for n in profile.nodes for e in profile.steps[n].ends if e < INF})
    for t in batch_ends(ends, window):
        if t >= before:
            break
        if t < exact:
            continue
        alloc = _consec_fit(c, capacity, _offers(profile, t, span))
        if not alloc:
            continue
        if batch_start:
            return t, alloc
        start = _last_end_on(profile, alloc, t)
        # the reported start holds the job on these nodes unless one of this pass's
        # reservations falls between it and the batch's end; then the batch's end
        return (start, alloc) if _fits(profile, alloc, start, span) else (t, alloc)
    return INF, []


def coarse_start(
    profile: Profile,
    c: Candidate,
    capacity: int,
    span: float,
    before: float,
    window: float,
    batch_start: bool,
    exact: float,
    alloc: list[tuple[str, int]],
) -> tuple[float, list[tuple[str, int]]]:
    """What the backfill pass reserves for a blocked job whose exact earliest start and
    GPUs are (exact, alloc): `willrun_start`'s answer, or the exact one where no batch of
    running jobs' ends holds the job (a start that waits for this pass's reservations,
    which cons_tres does not see, rather than for running jobs)."""
    s, at = willrun_start(profile, c, capacity, span, before, window, exact, batch_start)
    return (s, at) if at else (exact, alloc)
