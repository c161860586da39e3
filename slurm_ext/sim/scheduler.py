"""The simulator's scheduler: who starts pending jobs, and when.

`main_pass` walks the pending jobs best key first: a job starts if `choose_gpus` finds it
room (`fit`); otherwise, when preemptive, the rule `policy.preemption.choose_victims`
picks the running jobs to requeue so that it fits (`sim.preemption`). What happens to a
job that can neither fit nor preempt depends on `SimConfig.scheduler`: "greedy" skips it
(smaller, lower-ranked jobs may still start), "strict" and "slurm" (Slurm's main
scheduler) end the pass there; "slurm" then lets its backfill pass start lower-ranked
jobs that delay no reservation.

Slurm's main scheduler is that strict pass, run after every batch of events. With
`sched_tick_s` it runs at once only after a batch with a completion (or a policy tick):
slurmctld calls `schedule()` from the epilog-complete RPC, while a submit, a priority
update or a held job's release only counts a request (`queue_job_scheduler`), served by
its background loop at the next whole wall second (`defer_pass`). Its backfill pass runs
at the multiples of `bf_interval_s`, but only when something it reads changed since the
last one (a job arrived, started, ended or changed rank) and GPUs are free: otherwise it
would start nothing. The pass itself is `sim.backfill.backfill_pass`, a pure function.
The ticks of the backfill pass, of the main scheduler and of the policy's pass interval
are events of the engine's heap, armed here.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from heapq import heappop, heappush
from itertools import islice
from operator import itemgetter

from slurm_ext.policy import FreeIndex, choose_gpus
from slurm_ext.sim.backfill import (
    BackfillParams,
    Candidate,
    NodeSteps,
    backfill_pass,
    node_steps,
    round_up,
)
from slurm_ext.sim.cluster import Alloc
from slurm_ext.sim.corefit import cores_fit, fits_evenly
from slurm_ext.sim.keys import Bucket, KeyedQueues
from slurm_ext.sim.preemption import Preemption
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.state import BF_TICK, POLICY_TICK, SCHED_TICK, Engine, SimState

INF = math.inf
# a pass sorts bucket heaps of up to this many entries per `bf_max_job_test` (`_first_live`)
SORT_PER_JOB_TEST = 4
_first = itemgetter(0)


def next_multiple(now: float, step: float) -> float:
    """The first multiple of `step` after `now` (strictly: `k * step / step` can round
    below k, and a tick armed at `now` itself would fire again and again)."""
    k = math.floor(now / step) + 1
    t = k * step
    return t if t > now else (k + 1) * step


class Scheduler:
    """The main pass, Slurm's backfill pass and their ticks on one run's state; jobs
    start through the engine (`Engine._start`)."""

    def __init__(
        self, state: SimState, keys: KeyedQueues, preemption: Preemption, engine: Engine
    ) -> None:
        self.st, self.cl, self.cluster = state, state.cl, state.cluster
        self.idx, self.on_node = state.cluster.idx, state.cluster.on_node  # read most
        self.keys, self.preemption, self.engine = keys, preemption, engine
        self.clearing = preemption.clearing
        # the pending ticks (the engine clears each when it pops it)
        self.bf_due: float | None = None  # the pending backfill tick
        self.bf_changed = False  # something a backfill pass reads changed since the last
        self.policy_due: float | None = None  # the pending policy tick
        self.sched_due: float | None = None  # the main scheduler's pending tick
        self.sched_wanted = False  # a pass was asked for since the last (`defer_pass`)
        # the backfill pass's per-node steps, kept across passes; a node is stale once a
        # job starts or stops on it
        self.steps: dict[str, NodeSteps] = {}
        self.steps_stale: set[str] = set()

    # ---- the main pass ----------------------------------------------------------------
    def main_pass(self, now: float, policy_acts: bool = True) -> None:
        """Start pending jobs in key order; preempt for them when `policy_acts` (the
        policy's pass: every event, or a tick of `pass_interval_s`)."""
        keys, cl = self.keys, self.cl
        if keys.dynamic and keys.running and cl.preemptive:
            live = [e[3] for e in keys.running if e[1] == e[3].key_ver and e[3].running]
            keys.running.clear()
            for job in live:
                self.engine._rekey(job, now)
        blocked: set[Bucket] = set()
        can_preempt = cl.preemptive and policy_acts
        greedy = cl.scheduler == "greedy"
        idx = self.idx
        while True:
            tops = []
            for b, heap in keys.pending.items():
                if b not in blocked:
                    while heap:  # `keys.top(heap, False)`
                        e = heap[0]
                        job = e[3]
                        if e[1] == job.key_ver and not job.running and job.finish is None:
                            tops.append((e[0], b, job))
                            break
                        heappop(heap)
            if not tops:
                return
            tops.sort(key=_first)
            for _, b, job in tops:
                alloc = self.fit(idx, job)  # Slurm's node choice
                if alloc is None and can_preempt:
                    worst = keys.top(keys.running, True)
                    if worst is None or not worst.key > job.key:
                        can_preempt = False  # nobody ranks below this job or the next
                    elif self.clearing.may_make_room(job, now):
                        alloc = self.preemption.make_room(job, now)
                        # the service requeues for its best waiting job once per pass
                        can_preempt = not cl.one_preemption_per_pass
                if alloc is not None:
                    self.engine._start(job, alloc, now)  # its pending entry goes stale
                    break
                if not greedy:
                    return
                blocked.add(b)
            else:
                return

    def fit(self, idx: FreeIndex, job: SimJob) -> Alloc | None:
        """Where the main scheduler starts `job` on `idx`'s free GPUs: best fit on free
        GPUs (`choose_gpus`), or with `fit_cores` cons_tres's choice by free cores."""
        cpus = self.cluster.cpus(job.cpus_per_gpu)
        if self.cl.fit_cores and cpus is None and fits_evenly(job.gpus, idx.capacity):
            return cores_fit(idx.free, job.gpus, idx.capacity, self.free_cores())
        return choose_gpus(idx, job.gpus, job.must_consolidate, cpus)

    def free_cores(self) -> dict[str, int]:
        """Each node's free cores for `fit_cores`: one per job running there."""
        on_node = self.on_node
        return {n: self.cl.fit_cores - len(on_node[n]) for n in self.idx.free}

    # ---- ticks ------------------------------------------------------------------------
    def arm_ticks(self, now: float) -> None:
        """Schedule the next backfill tick (something changed) and policy tick."""
        cl, st = self.cl, self.st
        if self.bf_changed and self.bf_due is None and st.n_pending:
            self.bf_due = next_multiple(now, cl.bf_interval_s)
            st.push_event(self.bf_due, BF_TICK, None, 0)
        if cl.pass_interval_s and cl.preemptive and st.n_pending and self.policy_due is None:
            self.arm_policy_tick(now)

    def defer_pass(self, now: float) -> bool:
        """Ask the main scheduler for a pass at its next tick (a multiple of
        `sched_tick_s`), as `queue_job_scheduler` asks slurmctld's background loop;
        backfill sees the change at its own tick. False: no pass now."""
        self.sched_wanted = self.bf_changed = True
        if self.sched_due is None:
            self.sched_due = next_multiple(now, self.cl.sched_tick_s)
            self.st.push_event(self.sched_due, SCHED_TICK, None, 0)
        return False

    def arm_policy_tick(self, now: float) -> None:
        self.policy_due = next_multiple(now, self.cl.pass_interval_s)
        self.st.push_event(self.policy_due, POLICY_TICK, None, 0)

    # ---- the backfill pass ------------------------------------------------------------
    def nodes_changed(self, alloc: Alloc) -> None:
        """A job started or stopped on `alloc`'s nodes: their backfill steps are stale."""
        stale = self.steps_stale
        for n, _ in alloc:
            stale.add(n)

    def backfill(self, now: float) -> None:
        """One sched/backfill pass: start the jobs it backfills."""
        self.bf_changed = False
        idx = self.idx
        if idx.total_free <= 0 or not self.st.n_pending:
            return
        if not self.any_fits_now():
            return  # nothing can start now, whatever the reservations
        cl = self.cl
        params = BackfillParams(
            cl.bf_window_s,
            cl.bf_max_job_test,
            cl.bf_resolution_s,
            cl.bf_willrun_window_s,
            cl.bf_willrun_start == "batch",
            cl.bf_whole_nodes,
        )
        started = backfill_pass(
            now,
            self.candidates(),
            idx.free,
            self.node_ends,
            idx.capacity,
            params,
            self.cluster.free_cpus,
            steps=self.node_steps(),
            fit_cores=self.free_cores() if cl.fit_cores else None,
        )
        by_id = self.st.by_id
        for job_id, alloc in started:
            self.engine._start(by_id[job_id], alloc, now)

    def fits_now(self, bucket: Bucket) -> bool:
        """Whether a job of this bucket could fit the free GPUs now, by GPU count alone.
        Starts only take GPUs, so a bucket that cannot fit at the start of a pass cannot
        fit later in it."""
        idx = self.idx
        gpus, consolidate, _ = bucket
        if gpus > idx.total_free:
            return False
        return not consolidate or any(
            idx.buckets[f] for f in range(min(gpus, idx.capacity), idx.capacity + 1)
        )

    def any_fits_now(self) -> bool:
        """Whether some pending job could fit now (the pass could start something)."""
        top = self.keys.top
        return any(
            self.fits_now(b) and top(heap, False) is not None
            for b, heap in self.keys.pending.items()
        )

    def node_ends(self, node: str) -> list[tuple[float, int]]:
        """(when its time limit runs out, GPUs) of each job running on `node`."""
        return [
            (j.start + j.limit if j.limit is not None else INF, g)
            for j, g in self.on_node[node].items()
        ]

    def node_steps(self) -> dict[str, NodeSteps]:
        """Each node's `NodeSteps` (limit ends rounded up to `bf_resolution`), in node
        order, rebuilt only for nodes where a job started or stopped since (`steps_stale`,
        or free GPUs that no longer match)."""
        steps, free, stale = self.steps, self.idx.free, self.steps_stale
        if not steps:
            redo: Iterable[str] = list(free)  # the first pass: every node, in node order
        else:
            stale.update(n for n, st in steps.items() if st.frees[0] != free[n])
            redo = stale
        res = self.cl.bf_resolution_s
        for n in redo:
            ends = [(round_up(e, res), g) for e, g in self.node_ends(n)]
            steps[n] = node_steps(free[n], ends)
        stale.clear()
        return steps

    def candidates(self) -> list[Candidate]:
        """The pending jobs a pass may read, best key first: at most `bf_max_job_test`
        of them, so each bucket's first that many (`_first_live`), merged by one sort
        (of sorted runs: a merge in C). The list ends after the last job of a bucket that
        can fit now: the jobs after it cannot start in this pass, so neither their
        reservations nor anything after them changes what it starts."""
        most = self.cl.bf_max_job_test
        sort_max = SORT_PER_JOB_TEST * most
        merged: list[tuple] = []
        last_fit: tuple | None = None  # the greatest key among the fitting buckets' runs
        for b, heap in self.keys.pending.items():
            run = _first_live(heap, most, sort_max)
            if run:
                merged += run
                if self.fits_now(b) and (last_fit is None or run[-1][0] > last_fit):
                    last_fit = run[-1][0]
        if last_fit is None:
            return []
        merged.sort(key=_first)  # keys are distinct: one live entry per job
        end = min(bisect_right(merged, last_fit, key=_first), most)
        out = []
        for e in merged[:end]:
            job = e[3]
            cand = job.candidate  # what the pass reads of a job never changes: made once
            if cand is None:
                limit = job.limit if job.limit is not None else INF
                cand = Candidate(job.id, job.gpus, job.must_consolidate, limit, job.cpus_per_gpu)
                job.candidate = cand
            out.append(cand)
        return out


def _first_live(heap: list[tuple], most: int, sort_max: int) -> list[tuple]:
    """The first `most` live entries of a bucket heap, best first (a pass reads no more).
    A heap of at most `sort_max` entries is sorted in place and read (a pass in a backlog
    reads most of a bucket; popping and pushing back each entry cost twice the sort, and
    the next sort, a few pushes later, is near-linear). It is sorted by key alone, faster:
    live entries have distinct keys (the job id is the last field), so they keep the
    heap's order; a stale entry with its job's live key may come first, which leaves the
    heap valid against every other entry, and `KeyedQueues.top` drops it when it comes
    up. A larger heap (a backlog far beyond `bf_max_job_test`) has its first `most`
    popped and pushed back; stale entries are dropped on the way, as `KeyedQueues.top`
    does."""
    if len(heap) <= sort_max:
        heap.sort(key=_first)
        live = (
            e for e in heap if e[1] == e[3].key_ver and not e[3].running and e[3].finish is None
        )
        return list(islice(live, most))
    run: list[tuple] = []
    while heap and len(run) < most:
        e = heappop(heap)
        job = e[3]
        if e[1] == job.key_ver and not job.running and job.finish is None:
            run.append(e)
    for e in run:
        heappush(heap, e)
    return run
