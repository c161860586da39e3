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
are `sim.bfprofile`'s (`NodeSteps`, `Profile`); what a pass reads, `sim.bfinputs`'s
(`BackfillParams`, `Candidate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from slurm_ext.policy import FreeIndex, choose_gpus
from slurm_ext.sim.bfinputs import BackfillParams, Candidate, round_up
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
Alloc = list[tuple[str, int]]
# what `choose_gpus` needs to count cores too: free cores per node, cores per GPU
Cpus = tuple[Mapping[str, int], int]


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
) -> list[tuple[int, Alloc]]:
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
    bf = _Pass(now, free, capacity, params, free_cpus, fit_cores)
    if bf.total <= 0:
        return []
    bf.on_reserve = on_reserve
    bf.steps, bf.node_ends = steps, node_ends
    return bf.run(pending)


class _Pass:
    """One pass's state: what each node has free now, the reservations made so far (the
    `Profile`, built when first needed) and the blocked jobs not planned yet.

    The pass plans lazily: a blocked job's reservation is made only once a lower-ranked
    job could start now (`plan_deferred`), in priority order.
    """

    def __init__(
        self,
        now: float,
        free: Mapping[str, int],
        capacity: int,
        params: BackfillParams,
        free_cpus: Mapping[str, int] | None,
        fit_cores: Mapping[str, int] | None,
    ) -> None:
        self.capacity, self.params = capacity, params
        res = params.resolution_s
        self.base = math.floor(now / res) * res
        self.horizon = self.base + params.window_s
        self.free_now = dict(free)
        self.cores_now = dict(fit_cores) if fit_cores is not None else None
        self.cpus_now = dict(free_cpus) if free_cpus is not None else None
        self.total = sum(self.free_now.values())
        self.profile: Profile | None = None  # built when first needed
        self.steps: Mapping[str, NodeSteps] | None = None
        self.node_ends: Callable[[str], Iterable[tuple[float, int]]] | None = None
        self.on_reserve: Callable[[int, float], None] | None = None
        self.started: list[tuple[int, Alloc]] = []
        self.deferred: list[Candidate] = []  # blocked jobs whose reservation is not planned yet
        self.spans: dict[float, float] = {}  # time limit -> rounded up to `bf_resolution`
        # nodes a reservation for a blocked job took: only there can a node offer a job
        # starting now fewer GPUs than it has free (jobs started now take from both alike)
        self.planned: set[str] = set()
        self.open_nodes = [n for n, f in self.free_now.items() if f > 0]  # node order
        self.most = max(self.free_now.values(), default=0)
        # What a job may start on only shrinks as the pass goes (starts, reservations), and
        # whether `choose_gpus` finds room is monotone in it (the m largest nodes' free GPUs
        # reach the job's, or the total does). So a job that finds no room in the free GPUs
        # alone, or whose shape (GPUs, consolidate, span, cores per GPU) found none before,
        # cannot start: it needs no planning before it (reservations are still made in order)
        self.failed: set[tuple[int, bool, float, int]] = set()
        self.free_idx = FreeIndex(capacity)  # free_now, without the reservations
        for n in self.open_nodes:
            self.free_idx.set(n, self.free_now[n])

    def length(self, c: Candidate) -> float:
        """The job's time limit rounded up to `bf_resolution`."""
        span = self.spans.get(c.limit_s)
        if span is None:
            span = self.spans[c.limit_s] = round_up(c.limit_s, self.params.resolution_s)
        return span

    def run(self, pending: Iterable[Candidate]) -> list[tuple[int, Alloc]]:
        """Walk `pending` in priority order: start each job that fits now, for its time
        limit, without touching a reservation of the jobs before it; defer the others."""
        capacity, max_job_test = self.capacity, self.params.max_job_test
        cpus_now, cores_now = self.cpus_now, self.cores_now
        deferred, failed, free_idx = self.deferred, self.failed, self.free_idx
        for tested, c in enumerate(pending):
            if tested >= max_job_test or self.total <= 0:
                break
            need = c.gpus if not c.consolidate else min(c.gpus, capacity)
            if c.gpus > self.total or (c.consolidate and self.most < need):
                deferred.append(c)  # cannot start now whatever the reservations
                continue
            span = self.length(c)
            shape = (c.gpus, c.consolidate, span, c.cpus_per_gpu)
            cpus = (cpus_now, c.cpus_per_gpu) if cpus_now is not None and c.cpus_per_gpu else None
            if shape in failed or choose_gpus(free_idx, c.gpus, c.consolidate, cpus) is None:
                failed.add(shape)
                deferred.append(c)
                continue
            if self.profile is None:
                self.profile = self.new_profile()
            room_now = self.room(span)
            alloc = choose_gpus(room_now, c.gpus, c.consolidate, cpus)
            # no room with the reservations made so far: none once the deferred ones are
            if alloc is not None and deferred:
                after = self.plan_deferred(c, span, cpus, room_now)
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
            self.start(c, alloc, span)
        return self.started

    def new_profile(self) -> Profile:
        """The free GPUs per node over time, from the kept steps or the running jobs' ends."""
        if self.steps is not None:
            return Profile.from_steps(self.base, self.steps)
        res, node_ends = self.params.resolution_s, self.node_ends
        assert node_ends is not None
        ceil = math.ceil
        ends = {
            n: [(ceil(e / res) * res if e < INF else e, g) for e, g in node_ends(n)]
            for n in self.free_now
        }
        return Profile(self.base, self.free_now, ends)

    def start(self, c: Candidate, alloc: Alloc, span: float) -> None:
        """`c` starts now on `alloc` for `span`."""
        assert self.profile is not None
        self.profile.reserve(alloc, self.base, self.base + span)
        self.free_idx.take(alloc)
        free_now, cpus_now, cores_now = self.free_now, self.cpus_now, self.cores_now
        for n, g in alloc:
            free_now[n] -= g
            if cpus_now is not None:
                cpus_now[n] -= g * c.cpus_per_gpu
            if cores_now is not None:
                cores_now[n] -= 1
        self.total -= c.gpus
        self.started.append((c.job_id, alloc))
        self.open_nodes = [n for n in self.open_nodes if free_now[n] > 0]
        self.most = max((free_now[n] for n in self.open_nodes), default=0)

    def plan_deferred(
        self, c: Candidate, span: float, cpus: Cpus | None, room_now: FreeIndex
    ) -> FreeIndex | None:
        """Plan the deferred jobs in order (each at its earliest start in the window)
        while `c` still finds room (`room_now`: what each node gives it now, updated on
        the nodes each reservation takes before `base + span`); None, with the rest
        left deferred, once it finds none: it cannot start, and planning the rest may
        wait for a later job that can (or never be needed). Room only shrinks, so
        stopping early changes no decision. Else what each node gives `c` now: `room_now`
        if no reservation changed it, else afresh (its node order breaks ties)."""
        profile, base, free_now = self.profile, self.base, self.free_now
        assert profile is not None
        params, capacity, horizon = self.params, self.capacity, self.horizon
        willrun, batch = params.willrun_window_s, params.willrun_batch_start
        planned, on_reserve, deferred = self.planned, self.on_reserve, self.deferred
        end = base + span
        changed = False
        for i, d in enumerate(deferred):
            d_span = self.length(d)
            s, alloc = profile.earliest(d, capacity, d_span, horizon)
            if alloc and s > base and willrun:
                s, alloc = coarse_start(
                    profile, d, capacity, d_span, horizon, willrun, batch, s, alloc
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
        return self.room(span) if changed else room_now

    def room(self, span: float) -> FreeIndex:
        """What each node can give now for `span` seconds (reservations so far)."""
        profile, base, free_now, planned = self.profile, self.base, self.free_now, self.planned
        assert profile is not None
        idx = FreeIndex(self.capacity)
        for n in self.open_nodes:
            f = free_now[n]
            if n in planned:
                f = max(0, min(f, profile.window_min(n, base, base + span)))
            idx.set(n, f)
        return idx
