"""A model of Slurm's sched/backfill pass: reservations from time limits, then backfill.

Slurm's backfill plugin walks the pending jobs in priority order every `bf_interval`.
For each it finds the earliest time the job could start, given the running jobs' time
limits (start + limit: Slurm knows no true run times) and the reservations already made
in this pass for higher-priority jobs. A job that can start now, for its whole time
limit, without touching any of those reservations starts now (it is backfilled); any
other job gets a reservation at its earliest start, if that falls inside `bf_window`.
Times are kept in steps of `bf_resolution` (start rounded down, ends rounded up, as
slurmctld does). At most `bf_max_job_test` jobs are looked at per pass. With
`BackfillParams.willrun_window_s` > 0 a blocked job's start and nodes are the ones
cons_tres's will-run test reports (`sim.willrun.coarse_start`), not the earliest. With
`whole_nodes` a reservation takes its nodes whole, as Slurm's backfill map (a node
bitmap) does; with `fit_cores` a job started now goes where cons_tres puts it by free
cores (`sim.corefit`).

The model is per node and per GPU count: a node offers, over a time window, the fewest
GPUs free at any moment of it. It leaves out cores, memory and licences, advance
reservations, partitions, `bf_continue` (a pass here is instantaneous) and the per-user
and per-partition limits (`bf_max_job_user`, ...).

`backfill_pass` is a pure function of what the pass sees. It plans lazily: a blocked
job's reservation is computed only once a lower-ranked job could start now (the only
thing a pass changes is who starts now), in priority order, so the result is the same
as planning every job. The free GPUs per node over time and the earliest-start questions
are `sim.bfprofile`'s (`NodeSteps`, `Profile`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from slurm_ext.policy import FreeIndex, choose_gpus
from slurm_ext.sim.bfprofile import NodeSteps, Profile, node_steps
from slurm_ext.sim.corefit import cores_fit, fits_evenly
from slurm_ext.sim.willrun import coarse_start

__all__ = [
    "BackfillParams",
    "Candidate",
    "NodeSteps",
    "Profile",
    "backfill_pass",
    "node_steps",
    "round_up",
]

INF = math.inf


@dataclass(frozen=True)
class BackfillParams:
    """Slurm's SchedulerParameters that change what a pass does (defaults: Slurm's)."""

    window_s: float = 86400.0  # bf_window (Slurm: minutes, default 1 day)
    max_job_test: int = 500  # bf_max_job_test
    resolution_s: float = 60.0  # bf_resolution
    # cons_tres's will-run window (30 wall s): a blocked job's start as `sim.willrun`
    # reports it; 0: the earliest exact start
    willrun_window_s: float = 0.0
    willrun_batch_start: bool = False  # report the batch's last end (Slurm up to 23.x)
    # a blocked job's reservation takes its nodes whole, as Slurm's backfill map (a node
    # bitmap) does; False: only its GPUs
    whole_nodes: bool = False

    def __post_init__(self) -> None:
        if not (
            self.window_s > 0
            and self.resolution_s > 0
            and self.max_job_test >= 1
            and self.willrun_window_s >= 0
        ):
            raise ValueError(f"backfill parameters out of range: {self}")


class Candidate(NamedTuple):
    """A pending job as the pass sees it (a named tuple: a pass makes up to
    `bf_max_job_test` of them, and a frozen dataclass was slow to build)."""

    job_id: int
    gpus: int
    consolidate: bool  # must get the fewest nodes possible
    limit_s: float  # its time limit (inf: none)
    cpus_per_gpu: int = 0


def round_up(t: float, step: float) -> float:
    return math.ceil(t / step) * step if step > 0 and t < INF else t


def backfill_pass(
    now: float,
    pending: Iterable[Candidate],
    free: Mapping[str, int],
    node_ends: Callable[[str], Iterable[tuple[float, int]]],
    capacity: int,
    params: BackfillParams,
    free_cpus: Mapping[str, int] | None = None,
    on_reserve: Callable[[int, float], None] | None = None,
    steps: Mapping[str, NodeSteps] | None = None,
    fit_cores: Mapping[str, int] | None = None,
) -> list[tuple[int, list[tuple[str, int]]]]:
    """The jobs one backfill pass starts now, with their GPUs, in the order it starts them.

    pending: in priority order, best first; read up to `max_job_test` of them.
    free: free GPUs per node now (node order breaks ties).
    node_ends: per node, (when a running job's time limit runs out, its GPUs there).
    free_cpus: free cores per node when cores count: a job starting now needs them too.
    on_reserve: called with (job id, reserved start) for each reservation (tests).
    steps: per node of `free`, in its order, `node_steps` of its free GPUs and its
    `node_ends` rounded up to `bf_resolution` (a cache the caller keeps across passes);
    then `node_ends` is unused.
    fit_cores: free cores per node now when a starting one-node or whole-node job goes
    where cons_tres puts it by free cores (`sim.corefit`; each start takes one core per
    node); None: best fit on free GPUs.
    """
    res = params.resolution_s
    base = math.floor(now / res) * res
    free_now = dict(free)
    cores_now = dict(fit_cores) if fit_cores is not None else None
    cpus_now = dict(free_cpus) if free_cpus is not None else None
    total = sum(free_now.values())
    if total <= 0:
        return []
    profile: Profile | None = None  # built when first needed
    horizon = base + params.window_s
    started: list[tuple[int, list[tuple[str, int]]]] = []
    deferred: list[Candidate] = []  # blocked jobs whose reservation is not planned yet

    spans: dict[float, float] = {}  # time limit -> rounded up to `bf_resolution`

    def length(c: Candidate) -> float:
        span = spans.get(c.limit_s)
        if span is None:
            span = spans[c.limit_s] = round_up(c.limit_s, res)
        return span

    # nodes a reservation for a blocked job took: only there can a node offer a job
    # starting now fewer GPUs than it has free (jobs started now take from both alike)
    planned: set[str] = set()

    def plan_deferred(
        c: Candidate, span: float, cpus: tuple[Mapping[str, int], int] | None, room_now: FreeIndex
    ) -> FreeIndex | None:
        """Plan the deferred jobs in order (each at its earliest start in the window)
        while `c` still finds room (`room_now`: what each node gives it now, updated on
        the nodes each reservation takes before `base + span`); None, with the rest
        left deferred, once it finds none: it cannot start, and planning the rest may
        wait for a later job that can (or never be needed). Room only shrinks, so
        stopping early changes no decision. Else what each node gives `c` now: `room_now`
        if no reservation changed it, else afresh (its node order breaks ties)."""
        assert profile is not None
        end = base + span
        changed = False
        for i, d in enumerate(deferred):
            d_span = length(d)
            s, alloc = profile.earliest(d, capacity, d_span, horizon)
            if alloc and s > base and params.willrun_window_s > 0:
                window, batch = params.willrun_window_s, params.willrun_batch_start
                s, alloc = coarse_start(
                    profile, d, capacity, d_span, horizon, window, batch, s, alloc
                )
            if not alloc or s >= horizon:
                continue
            profile.reserve(
                [(n, capacity) for n, _ in alloc] if params.whole_nodes else alloc, s, s + d_span
            )
            planned.update(n for n, _ in alloc)
            if on_reserve is not None:
                on_reserve(d.job_id, s)
            if s >= end or not any(free_now[n] for n, _ in alloc):
                continue
            for n, _ in alloc:
                f = free_now[n]
                if f > 0:
                    room_now.set(n, max(0, min(f, profile.window_min(n, base, end))))
            changed = True
            if choose_gpus(room_now, c.gpus, c.consolidate, cpus) is None:
                del deferred[: i + 1]
                return None
        deferred.clear()
        return room(span) if changed else room_now

    def room(span: float) -> FreeIndex:
        """What each node can give now for `span` seconds (reservations so far)."""
        assert profile is not None
        idx = FreeIndex(capacity)
        for n in open_nodes:
            f = free_now[n]
            if n in planned:
                f = max(0, min(f, profile.window_min(n, base, base + span)))
            idx.set(n, f)
        return idx

    most = max(free_now.values())
    open_nodes = [n for n, f in free_now.items() if f > 0]  # node order
    ceil = math.ceil
    # What a job may start on only shrinks as the pass goes (starts, reservations), and
    # whether `choose_gpus` finds room is monotone in it (the m largest nodes' free GPUs
    # reach the job's, or the total does). So a job that finds no room in the free GPUs
    # alone, or whose shape (GPUs, consolidate, span, cores per GPU) found none before,
    # cannot start: it needs no planning before it (reservations are still made in order)
    failed: set[tuple[int, bool, float, int]] = set()
    free_idx = FreeIndex(capacity)  # free_now, without the reservations
    for n in open_nodes:
        free_idx.set(n, free_now[n])
    for tested, c in enumerate(pending):
        if tested >= params.max_job_test or total <= 0:
            break
        need = c.gpus if not c.consolidate else min(c.gpus, capacity)
        if c.gpus > total or (c.consolidate and most < need):
            deferred.append(c)  # cannot start now whatever the reservations
            continue
        span = length(c)
        shape = (c.gpus, c.consolidate, span, c.cpus_per_gpu)
        cpus = (cpus_now, c.cpus_per_gpu) if cpus_now is not None and c.cpus_per_gpu else None
        if shape in failed or choose_gpus(free_idx, c.gpus, c.consolidate, cpus) is None:
            failed.add(shape)
            deferred.append(c)
            continue
        if profile is None:
            if steps is not None:
                profile = Profile.from_steps(base, steps)
            else:
                ends = {
                    n: [(ceil(e / res) * res if e < INF else e, g) for e, g in node_ends(n)]
                    for n in free_now
                }
                profile = Profile(base, free_now, ends)
        room_now = room(span)
        alloc = choose_gpus(room_now, c.gpus, c.consolidate, cpus)
        # no room with the reservations made so far: none once the deferred ones are made
        if alloc is not None and deferred:
            after = plan_deferred(c, span, cpus, room_now)
            if after is None:
                alloc = None
            elif after is not room_now:  # a reservation took some of its room
                alloc = choose_gpus(after, c.gpus, c.consolidate, cpus)
                room_now = after
        if alloc is not None and cores_now is not None and fits_evenly(c.gpus, capacity):
            alloc = cores_fit(room_now.free, c.gpus, capacity, cores_now)
        if alloc is None:
            failed.add(shape)
            deferred.append(c)
            continue
        profile.reserve(alloc, base, base + span)
        free_idx.take(alloc)
        for n, g in alloc:
            free_now[n] -= g
            if cpus_now is not None:
                cpus_now[n] -= g * c.cpus_per_gpu
            if cores_now is not None:
                cores_now[n] -= 1
        total -= c.gpus
        started.append((c.job_id, alloc))
        open_nodes = [n for n in open_nodes if free_now[n] > 0]
        most = max((free_now[n] for n in open_nodes), default=0)
    return started
