"""Event-driven cluster simulator that schedules with the policy core.

Events (a heap): arrivals, completions (or time-limit kills), wake-ups when a job's
priority key changes on its own (queue threshold or Gittins grid crossed, protection
over, starvation promotion, as `policy.key_change_after` says), and the ticks of the
policy's pass interval and of Slurm's backfill pass. After each batch of same-time
events (or at the main scheduler's next tick: `sim.scheduler`, `sched_tick_s`) one pass
walks the pending jobs best key first and starts, preempts or stops as
`SimConfig.scheduler` says (`sim.scheduler`).

Optional CPU dimension (`SimConfig.cpus_per_node`): a job also needs cores, its GPUs on a
node x its cores per GPU, and runs at the speed those cores give its model
(`sim.cpus.cpu_speed`), so a starved job holds its GPUs longer. Off by default, and then
nothing about a run changes.

The engine is the event loop and a job's life (start, stop, requeue, completion); it
owns the parts that hold the rest of a run, one concept per module, and calls them:
- `sim.state`: what the parts share (`SimState`: configs, cluster, events);
- `sim.cluster`: nodes, free GPUs and cores, which job holds what (`ClusterState`);
- `sim.keys`: the priority keys in incremental heaps (`KeyedQueues`);
- `sim.preemption`: the preemption choice (`Preemption`), with `sim.clearing` its
  node-clearing tables and no-room cache (`NodeClearing`);
- `sim.scheduler`: the main pass, Slurm's backfill pass (`sim.backfill`) and their ticks
  (`Scheduler`).
A part that needs a job started, requeued or re-keyed asks the engine (`state.Engine`),
so a subclass that extends those transitions (co-location: `sim.coloc`) sees them all.

A run cannot loop without progress: STUCK_PASSES passes in a row at one time that start
and end no job, a finished job started again, or jobs left unfinished when the events
run out raise SimulationStuck, naming the job and the time.
"""

from __future__ import annotations

import gc
import heapq
import math
import weakref
from collections.abc import Callable, Iterable
from heapq import heappop
from typing import cast

from slurm_ext.core.model import Completed, JobView
from slurm_ext.policy import (
    GittinsTable,
    PolicyConfig,
    min_nodes,
    spread_slowdown,
    starvation_lifts,
    wait_guarded,
)
from slurm_ext.sim.clearing import NodeClearing, all_may_go, max_requeue_cost
from slurm_ext.sim.cluster import Alloc, ClusterState, sim_jobs
from slurm_ext.sim.keys import KeyedQueues
from slurm_ext.sim.preemption import Preemption
from slurm_ext.sim.scheduler import Scheduler
from slurm_ext.sim.simjob import SCHEDULERS, SimConfig, SimJob
from slurm_ext.sim.state import BF_TICK, FINISH, INF, POLICY_TICK, WAKE, Engine, SimState
from slurm_ext.sim.traces import TraceJob

# the event heap is purged of stale entries when it outgrows max(this, twice its live size)
EVENTS_MIN = 4096
# passes in a row at one time that start and end no job before the run is stuck; another
# pass at one time follows only an event filed for that same time (ticks, wake-ups), a
# handful per job that starts or ends there
STUCK_PASSES = 1000

__all__ = ["SCHEDULERS", "SimConfig", "SimJob", "SimulationStuck", "Simulator"]


class SimulationStuck(RuntimeError):
    """A run that would never end: the message names the job and the time."""


class Simulator:
    """One run of a trace on a simulated cluster (`run()` returns the jobs, finished)."""

    def __init__(
        self,
        trace: Iterable[TraceJob],
        policy: PolicyConfig,
        cluster: SimConfig,
        on_pass: Callable[[Simulator, float], None] | None = None,
        progress: Callable[[int, int, float], None] | None = None,
    ) -> None:
        # the whole-job index when this cluster does not preempt (`for_preemption`)
        self.cfg, self.cl = policy.for_preemption(cluster.preemptive), cluster
        self.on_pass, self.progress = on_pass, progress
        self.jobs, every_job_preemptible = sim_jobs(list(trace), cluster)
        self.by_id = {j.id: j for j in self.jobs}
        self.state = SimState(self.cfg, cluster, ClusterState(cluster), self.by_id)
        self.cluster = self.state.cluster
        self.clearing, self.keys, self.preemption, self.scheduler = self._parts(
            every_job_preemptible
        )
        if type(self)._rekey is Simulator._rekey:
            # the hottest call: without a subclass's extension, the keys' own method,
            # bound here (the delegating frame cost 1% of a run's instructions)
            self._rekey = self.keys.rekey  # type: ignore[method-assign]
        # arrivals wait in submit order outside the heap; each still counts as an event
        # (seq), and at equal times they come after completions and before wake-ups, as
        # the heap's (time, kind, seq) order would put them
        self.arrivals = sorted(self.jobs, key=lambda j: j.submit)
        self.state.seq += len(self.jobs)
        self.events_cap = EVENTS_MIN  # `_purge_events` once the heap grows past this
        self.slurm = cluster.scheduler == "slurm"
        # GPU-seconds of each job's ended stints as Slurm's clock times them (clock_s > 0)
        self.clocked: dict[int, float] = {}
        # the run's results besides the jobs
        self.preemptions = self.timeouts = self.done = 0
        self.starts = 0  # stints begun: with `done`, the progress the stuck guard sees
        self.last_pass, self.stalled = (-INF, 0), 0  # the stuck guard (`_pass`)
        self.lost_work_gpu_s = 0.0  # GPU-seconds of progress lost to requeues

    def _parts(
        self, every_job_preemptible: bool
    ) -> tuple[NodeClearing, KeyedQueues, Preemption, Scheduler]:
        """The parts of this run, each over the shared state, calling back this engine
        through a weak proxy: a run makes no reference cycle, so a finished one is freed
        at once, with no garbage collection to walk it."""
        st, engine = self.state, cast(Engine, weakref.proxy(self))
        clearing = NodeClearing(
            st, engine, all_may_go(every_job_preemptible, st), max_requeue_cost(self.jobs, self.cl)
        )
        keys = KeyedQueues(st, clearing, engine, self.jobs, self.cl.history)
        preemption = Preemption(st, keys, clearing, engine)
        return clearing, keys, preemption, Scheduler(st, keys, preemption, engine)

    @property
    def seq(self) -> int:
        """Events and heap entries filed: a run's count of its work, compared by tests."""
        return self.state.seq

    @property
    def table(self) -> GittinsTable | None:
        """The Gittins table the keys read now."""
        return self.keys.table

    @property
    def total_gpus(self) -> int:
        return self.cluster.total_gpus

    # ---- events -------------------------------------------------------------------
    def run(self) -> list[SimJob]:
        """Run the trace to its end; the jobs, finished.

        Python's cyclic garbage collector is off meanwhile: a run makes no reference
        cycles, yet each collection walked every live event and heap entry, a quarter of
        a long run's time (bench_sim at 50,000 jobs). Restored as it was after the run."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> list[SimJob]:
        st, keys, sched = self.state, self.keys, self.scheduler
        events, arrivals = st.events, self.arrivals
        n, ai, passes = len(self.jobs), 0, 0
        next_arrival = arrivals[0].submit if arrivals else INF
        rekey = self._rekey
        preemptive, dynamic = self.cl.preemptive, keys.dynamic
        every = self.cl.pass_interval_s  # the policy acts at its multiples (0: every event)
        tick = self.cl.sched_tick_s  # Slurm's main scheduler waits for it (0: runs at events)
        # a stale event alone at its time makes an empty iteration, except for the
        # continuous keys' pass (`dynamic`): only then must stale events stay
        purge = not dynamic
        while events or ai < n:
            if purge and len(events) > self.events_cap:
                self._purge_events()
            now = events[0][0] if events else INF
            if next_arrival < now:
                now = next_arrival
            need_pass = False
            # nothing at `now` is pushed before the pass: completions, arrivals, wake-ups
            while events and events[0][0] == now and events[0][1] == FINISH:
                _, _, _, ver, job = heappop(events)
                if job.running and ver == job.run_ver:
                    self._complete(job, now)
                    need_pass = True
            ended = need_pass  # a job ended: Slurm's main scheduler runs at once
            while next_arrival == now:
                job = arrivals[ai]
                ai += 1
                next_arrival = arrivals[ai].submit if ai < n else INF
                st.n_pending += 1
                rekey(job, now)
                need_pass = True
            policy_tick = bf_tick = sched_tick = False
            while events and events[0][0] == now:
                _, kind, _, ver, job = heappop(events)
                if kind > WAKE:  # a tick the scheduler armed: no longer pending
                    if kind == POLICY_TICK:
                        policy_tick, sched.policy_due = True, None
                    elif kind == BF_TICK:
                        bf_tick, sched.bf_due = True, None
                    else:  # SCHED_TICK: a pass if one was asked for since the last
                        sched_tick, sched.sched_due = sched.sched_wanted, None
                    # (an unconditional jump back: Python 3.11 specialises this function
                    # only on those, and a `while` loop's own jump back is conditional)
                    continue
                if ver == job.key_ver and job.finish is None:  # WAKE
                    rekey(job, now, True)
                    # a running job's new key matters only if a pending job now outranks
                    # it (a preemption may follow): `outranked`, its cached answer inline
                    if need_pass:
                        pass
                    elif not job.running:
                        need_pass = True
                    elif preemptive:
                        if keys.best_pending_at == keys.pending_ver:
                            need_pass = keys.best_pending < job.key
                        else:
                            need_pass = keys.outranked(job.key)
            if tick and need_pass and not (ended or policy_tick or sched_tick):
                need_pass = sched.defer_pass(now)  # to the main scheduler's next tick
            if need_pass or sched_tick or dynamic or policy_tick:
                self._pass(now, not every or policy_tick)
                sched.sched_wanted = False
                if self.on_pass is not None:
                    self.on_pass(self, now)
            if self.slurm:
                sched.bf_changed |= need_pass
                if bf_tick:
                    self._backfill(now)
                sched.arm_ticks(now)
            elif every and st.n_pending and sched.policy_due is None and preemptive:
                sched.arm_policy_tick(now)
            passes += 1
            if self.progress is not None and passes % 5000 == 0:
                self.progress(self.done, n, now)
        if self.done != n:
            raise self._unfinished()
        return self.jobs

    def _unfinished(self) -> SimulationStuck:
        """The error for a run whose events ran out before its jobs did."""
        left = [j for j in self.jobs if j.finish is None]
        return SimulationStuck(
            f"simulation ended with {len(left)} jobs unfinished: job {left[0].id} "
            f"(submitted at t={left[0].submit:.0f} s) never finished"
        )

    def _purge_events(self) -> None:
        """Drop the stale completions and wake-ups from the event heap, in place.

        Each key change files a new wake-up and leaves the old one in the heap (a history
        refresh re-keys every active job): on bursty traces the heap held about 8 live
        entries in 10. Popped, a stale entry does nothing, so dropping it early changes
        no decision; the live ones keep their (time, kind, seq) order, which is total."""
        events = self.state.events
        live = [
            e
            for e in events
            if e[4] is None  # a tick
            or (
                e[3] == e[4].run_ver and e[4].running
                if e[1] == FINISH
                else e[3] == e[4].key_ver and e[4].finish is None
            )
        ]
        heapq.heapify(live)
        events[:] = live
        self.events_cap = max(EVENTS_MIN, 2 * len(live))

    # ---- a job's life (the parts ask for these: `state.Engine`) ---------------------
    def _rekey(self, job: SimJob, now: float, wake: bool = False) -> None:
        """Re-key `job` (`KeyedQueues.rekey`); `wake`: at its own wake-up."""
        self.keys.rekey(job, now, wake)

    def _pass(self, now: float, policy_acts: bool = True) -> None:
        """One scheduling pass (`Scheduler.main_pass`), once the stuck guard has seen
        progress: STUCK_PASSES passes in a row at one time, with no job started or ended
        since the first, raise SimulationStuck."""
        mark = (now, self.done + self.starts)
        if mark != self.last_pass:
            self.last_pass, self.stalled = mark, 0
        else:
            self.stalled += 1
            if self.stalled >= STUCK_PASSES:
                raise self._stuck(now)
        self.scheduler.main_pass(now, policy_acts)

    def _stuck(self, now: float) -> SimulationStuck:
        """The error for passes at `now` that make no progress, naming the best-ranked
        waiting job."""
        waiting = (self.by_id[i] for i in self.order())
        job = next((j for j in waiting if not j.running and j.finish is None), None)
        who = f"job {job.id} waits first" if job is not None else "no job waits"
        return SimulationStuck(
            f"no progress at t={now:.0f} s: {STUCK_PASSES} passes in a row started and "
            f"ended no job ({who})"
        )

    def _backfill(self, now: float) -> None:
        """One backfill pass (`Scheduler.backfill`)."""
        self.scheduler.backfill(now)

    def _start(self, job: SimJob, alloc: Alloc, now: float) -> None:
        # a promoted job gets a fresh quantum (and keeps the wait guard's rank a while:
        # `wait_guard_keep`); the service reads the same from its last pass
        # (`starts_promoted`)
        cfg, keys, st = self.cfg, self.keys, self.state
        if job.finish is not None:  # a finished job started again: a run without end
            raise SimulationStuck(f"job {job.id} started at t={now:.0f} s after it finished")
        self.starts += 1
        facts = job.view(now)
        promoted = starvation_lifts(facts, now, cfg, keys.table)
        if not promoted and cfg.wait_guard_keep > 0:
            promoted = wait_guarded(facts, now, cfg, keys.table)
        job.begin_stint(now, promoted)
        st.cluster.take(job, alloc)
        keys.pending_ver += 1  # it leaves the pending set
        st.n_pending -= 1
        st.running_jobs.add(job)
        self.scheduler.nodes_changed(alloc)
        job.alloc = alloc
        job.running = True
        job.start = now
        job.overhead = self.cl.restart_overhead_s if job.stints > 0 else 0.0
        spread = len(alloc) > min_nodes(job.gpus, self.cl.gpus_per_node)
        # wall seconds per work second: spread over extra nodes, starved of cores (speed)
        job.slowdown = (spread_slowdown(job.model) if spread else 1.0) / job.speed
        job.stints += 1
        if job.first_start is None:
            job.first_start = now
        job.run_ver += 1
        finish = now + job.overhead + (job.duration - job.progress) * job.slowdown
        job.killed = False
        if self.slurm and job.limit is not None and finish > now + job.limit:
            finish, job.killed = now + job.limit, True  # Slurm ends the stint at its limit
        st.push_event(finish, FINISH, job, job.run_ver)
        self._rekey(job, now)

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        st, ledger = self.state, self.keys.ledger
        if ledger is not None:
            ledger.charge(job.user, job.gpus, job.start, now)
        ran = now - job.start
        if self.cl.clock_s:  # whole ticks between the start's and the end's (Slurm's times)
            tick = self.cl.clock_s
            whole = math.floor(now / tick) - math.floor(job.start / tick)
            self.clocked[job.id] = self.clocked.get(job.id, 0.0) + job.gpus * whole * tick
        job.progress = min(job.duration, job.progress + max(0.0, ran - job.overhead) / job.slowdown)
        job.end_stint(now)
        job.running = False
        st.running_jobs.discard(job)
        job.run_ver += 1
        st.cluster.leave(job, release)
        self.clearing.job_left(job.alloc)
        self.scheduler.nodes_changed(job.alloc)
        job.alloc = []

    def _preempt(self, job: SimJob, now: float, release: bool = False) -> None:
        """Requeue `job`: it stops, loses the work since its last checkpoint and waits."""
        self._stop(job, now, release=release)
        job.preemptions += 1
        self.preemptions += 1
        self.state.n_pending += 1
        every = self.cl.checkpoint_interval_s
        if every > 0:  # it resumes from its last checkpoint
            kept = math.floor(job.progress / every) * every
            self.lost_work_gpu_s += (job.progress - kept) * job.gpus
            job.progress = kept
        job.waiting_since = now
        if self.cl.requeue_delay_s > 0:  # Slurm holds it (begin time): re-filed on a wake
            job.key, job.key_ver = (), job.key_ver + 1
            self.state.push_event(now + self.cl.requeue_delay_s, WAKE, job, job.key_ver)
            return
        self._rekey(job, now)

    def _complete(self, job: SimJob, now: float) -> None:
        self._stop(job, now)
        job.finish = now
        if job.killed:
            job.timed_out = True
            self.timeouts += 1
        job.key_ver += 1
        self.done += 1
        if self.cfg.policy == "gittins":
            gpu_s = self.clocked.pop(job.id, 0.0) if self.cl.clock_s else job.attained
            record = Completed(job.gpus, gpu_s, job.user, job.name, job.account, job.limit)
            self.keys.completed(record, now)

    # ---- inspection -------------------------------------------------------------------
    def order(self) -> list[int]:
        """Job ids in the order the keys hold them (best first: `KeyedQueues.order`)."""
        return self.keys.order()

    def active(self) -> list[SimJob]:
        return [j for j in self.jobs if j.finish is None and (j.running or j.key_ver > 0)]

    def views(self, now: float) -> list[JobView]:
        return [j.view(now) for j in self.active()]
