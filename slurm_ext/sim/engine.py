"""Event-driven cluster simulator that schedules with the policy core.

Events (a heap): arrivals, completions (or time-limit kills), wake-ups when a job's
priority key changes on its own (queue threshold or Gittins grid crossed, protection
over, starvation promotion, as `policy.key_change_after` says), and the ticks of the
policy's pass interval and of Slurm's backfill pass. After each batch of same-time
events (or at the main scheduler's next tick: `sim.scheduler`, `sched_tick_s`) one pass
walks the pending jobs best key first: a job starts if `choose_gpus` finds it room;
otherwise, when preemptive, the rule `policy.preemption.choose_victims` picks the
running jobs to requeue so that it fits. What happens to a job that can
neither fit nor preempt depends on `SimConfig.scheduler`: "greedy" skips it (smaller,
lower-ranked jobs may still start), "strict" and "slurm" (Slurm's main scheduler) end
the pass there; "slurm" then lets its backfill pass (`sim.scheduler`, `sim.backfill`)
start lower-ranked jobs that delay no reservation.

Optional CPU dimension (`SimConfig.cpus_per_node`): a job also needs cores, its GPUs on a
node x its cores per GPU, and runs at the speed those cores give its model
(`sim.cpus.cpu_speed`), so a starved job holds its GPUs longer. Off by default, and then
nothing about a run changes.

The engine is the event loop and a job's life (start, stop, completion); the rest of a
run's state lives beside it, one concept per module:
- `sim.cluster`: nodes, free GPUs and cores, which job holds what (`ClusterState`);
- `sim.keys`: the priority keys in incremental heaps (`KeyedQueues`);
- `sim.preemption`: the preemption choice and the requeue (`Preemption`), with
  `sim.clearing` its node-clearing tables and no-room cache (`NodeClearing`);
- `sim.scheduler` and `sim.backfill`: Slurm's backfill pass (`SlurmPasses`).
"""

from __future__ import annotations

import gc
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from heapq import heappop
from operator import itemgetter

from slurm_ext.core.model import Completed, JobView
from slurm_ext.policy import GittinsTable, PolicyConfig, build_table, spread_slowdown
from slurm_ext.policy.guards import wait_guarded
from slurm_ext.policy.kinds import Choice
from slurm_ext.policy.placement import min_nodes
from slurm_ext.policy.queues import starvation_lifts
from slurm_ext.sim.backfill import NodeSteps
from slurm_ext.sim.clearing import ABOVE_ALL, NodeClearing
from slurm_ext.sim.cluster import ClusterState, sim_jobs
from slurm_ext.sim.fairshare import fairshare_ledger
from slurm_ext.sim.keys import RUNNING_MIN, KeyedQueues
from slurm_ext.sim.preemption import Preemption
from slurm_ext.sim.scheduler import SlurmPasses
from slurm_ext.sim.simjob import SCHEDULERS, SimConfig, SimJob
from slurm_ext.sim.traces import TraceJob

# same-time order: free GPUs first, then arrivals, key changes, the policy's and Slurm's ticks
FINISH, ARRIVE, WAKE, POLICY_TICK, BF_TICK, SCHED_TICK = 0, 1, 2, 3, 4, 5
INF = math.inf
_first = itemgetter(0)
# the event heap is purged of stale entries when it outgrows max(this, twice its live size)
EVENTS_MIN = 4096

__all__ = ["SCHEDULERS", "SimConfig", "SimJob", "Simulator"]


class Simulator(KeyedQueues, SlurmPasses, Preemption, NodeClearing):
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
        trace_jobs = list(trace)
        self.jobs, every_job_preemptible = sim_jobs(trace_jobs, cluster)
        self.cluster = ClusterState(cluster)
        # the cluster state's parts that the passes read most (the same objects)
        self.idx, self.free_cpus = self.cluster.idx, self.cluster.free_cpus
        self.on_node, self.node_names = self.cluster.on_node, self.cluster.node_names
        self.node_pos, self.total_gpus = self.cluster.node_pos, self.cluster.total_gpus
        self.events: list[tuple[float, int, int, int, SimJob]] = []
        self.events_cap = EVENTS_MIN  # `_purge_events` once the heap grows past this
        self.seq = 0
        self.pending: dict[tuple[int, bool, int], list] = {}
        # bumped whenever a job enters, re-enters or leaves the pending set
        self.pending_ver = 0
        self.best_pending: tuple = ABOVE_ALL
        self.best_pending_at = -1
        self.running: list = []  # (negated key, key_ver, seq, job): worst on top
        self.running_cap = RUNNING_MIN  # `_compact_running` past this many entries
        # GPU-seconds (cluster.history), (GPUs, GPU-seconds) or Completed records (with
        # the job's kind) of completed jobs
        self.history: deque[float | tuple[int, float] | Completed] = deque(
            cluster.history, maxlen=self.cfg.history_window
        )
        self.since_refresh = 0
        # GPU-seconds of each job's ended stints as Slurm's clock times them (clock_s > 0)
        self.clocked: dict[int, float] = {}
        self.table: GittinsTable | None = None
        self.choices: dict[SimJob, Choice] = {}  # each job's kind tables (sim/keys.py)
        if policy.policy == "gittins" and self.history:
            self.table = build_table(list(self.history), self.cfg)
        # Slurm's fair-share usage per user, when keys read it (policy/fairshare.py)
        self.ledger = fairshare_ledger(self.cfg, self.jobs)
        self.dynamic = policy.policy == "srtf"  # running keys change continuously
        self.preemptions = 0
        self.timeouts = 0
        self.lost_work_gpu_s = 0.0  # GPU-seconds of progress lost to requeues
        self.done = 0
        self.slurm = cluster.scheduler == "slurm"
        self.running_jobs: set[SimJob] = set()
        self.n_pending = 0
        self.bf_due: float | None = None  # the pending backfill tick
        self.bf_changed = False  # something a backfill pass reads changed since the last
        self.policy_due: float | None = None  # the pending policy tick
        self.sched_due, self.sched_wanted = None, False  # main scheduler's tick (scheduler.py)
        # the backfill pass's per-node steps, kept across passes; a node is stale once a
        # job starts or stops on it (sim/scheduler.py)
        self.steps: dict[str, NodeSteps] = {}
        self.steps_stale: set[str] = set()
        self.cleared: list[int] = []
        self.verify_victims = False  # tests: check the clearing tables against the rule
        # the no-room cache and the clearing tables: see sim/clearing.py
        self.epoch = 0
        self.grown: list[str] = []
        self.blocked_keys: list[tuple] = []
        self.blocked_job: dict[tuple, SimJob] = {}
        self.blocked_limit = 1024
        self.no_room: dict[int, tuple] = {}
        self.node_worst: dict[str, list[tuple[tuple, int, SimJob]]] = {
            n: [] for n in self.node_names
        }
        # need_by[t * nodes + i] = need[t] of the i-th node (a column per t, so a clearing
        # attempt scans one slice in C; a node's table is written with one slice store)
        self.need_by: list[tuple] = [ABOVE_ALL] * (cluster.nodes * (self.idx.capacity + 1))
        self.dirty: set[str] = set(self.node_names)
        # arrivals wait in submit order outside the heap; each still counts as an event
        # (seq), and at equal times they come after completions and before wake-ups, as
        # the heap's (time, kind, seq) order would put them
        self.arrivals = sorted(self.jobs, key=lambda j: j.submit)
        self.by_id = {j.id: j for j in self.jobs}
        self.seq += len(self.jobs)
        # the clearing tables assume every job below may go: not with a cap or costs
        rule = self.cfg.max_preemptions > 0 or self.cfg.preemption_cost
        rule = rule or cluster.max_requeues_per_pass > 0
        self.all_preemptible = every_job_preemptible and not rule
        # the most GPU-seconds a requeue can cost (`requeue_cost_gpu_s`): a waiting job
        # whose gain covers it finds every job that may ever go eligible
        widest = max((j.gpus for j in self.jobs), default=0)
        self.max_lost = widest * (cluster.checkpoint_interval_s + cluster.requeue_restart_s)

    # ---- events -------------------------------------------------------------------
    def _push_event(self, when: float, kind: int, job: SimJob, ver: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, ver, job))

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
        events = self.events
        arrivals = self.arrivals
        n = len(self.jobs)
        ai = 0
        next_arrival = arrivals[0].submit if arrivals else math.inf
        rekey = self._rekey
        preemptive = self.cl.preemptive
        every = self.cl.pass_interval_s  # the policy acts at its multiples (0: every event)
        tick = self.cl.sched_tick_s  # Slurm's main scheduler waits for it (0: runs at events)
        passes = 0
        # a stale event alone at its time makes an empty iteration, except for the
        # continuous keys' pass (`dynamic`): only then must stale events stay
        purge = not self.dynamic
        while events or ai < n:
            if purge and len(events) > self.events_cap:
                self._purge_events()
            now = events[0][0] if events else math.inf
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
                next_arrival = arrivals[ai].submit if ai < n else math.inf
                self.n_pending += 1
                self._rekey(job, now)
                need_pass = True
            policy_tick = bf_tick = sched_tick = False
            while events and events[0][0] == now:
                _, kind, _, ver, job = heappop(events)
                if kind > WAKE:  # a tick
                    if kind == POLICY_TICK:
                        policy_tick, self.policy_due = True, None
                    elif kind == BF_TICK:
                        bf_tick, self.bf_due = True, None
                    else:  # SCHED_TICK: a pass if one was asked for since the last
                        sched_tick, self.sched_due = self.sched_wanted, None
                    continue
                if ver == job.key_ver and job.finish is None:  # WAKE
                    rekey(job, now, True)
                    # a running job whose key changed matters only if a pending job
                    # now outranks it (a preemption may follow): `_outranked`, its cached
                    # answer inline
                    if need_pass:
                        pass
                    elif not job.running:
                        need_pass = True
                    elif preemptive:
                        if self.best_pending_at == self.pending_ver:
                            need_pass = self.best_pending < job.key
                        else:
                            need_pass = self._outranked(job.key)
            if tick and need_pass and not (ended or policy_tick or sched_tick):
                need_pass = self._defer_pass(now)  # to the main scheduler's next tick
            if need_pass or sched_tick or self.dynamic or policy_tick:
                self._pass(now, not every or policy_tick)
                self.sched_wanted = False
                if self.on_pass is not None:
                    self.on_pass(self, now)
            if self.slurm:
                self.bf_changed |= need_pass
                if bf_tick:
                    self._backfill(now)
                self._arm_ticks(now)
            elif every and self.n_pending and self.policy_due is None and preemptive:
                self._arm_policy_tick(now)
            passes += 1
            if self.progress is not None and passes % 5000 == 0:
                self.progress(self.done, n, now)
        if self.done != n:
            raise RuntimeError(f"simulation ended with {n - self.done} jobs unfinished")
        return self.jobs

    def _purge_events(self) -> None:
        """Drop the stale completions and wake-ups from the event heap, in place.

        Each key change files a new wake-up and leaves the old one in the heap (a history
        refresh re-keys every active job): on bursty traces the heap held about 8 live
        entries in 10. Popped, a stale entry does nothing, so dropping it early changes
        no decision; the live ones keep their (time, kind, seq) order, which is total."""
        events = self.events
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

    # ---- scheduling pass ----------------------------------------------------------
    def _pass(self, now: float, policy_acts: bool = True) -> None:
        """Start pending jobs in key order; preempt for them when `policy_acts` (the
        policy's pass: every event, or a tick of `pass_interval_s`)."""
        if self.dynamic and self.running and self.cl.preemptive:
            live = [e[3] for e in self.running if e[1] == e[3].key_ver and e[3].running]
            self.running = []
            for job in live:
                self._rekey(job, now)
        blocked: set[tuple[int, bool, int]] = set()
        can_preempt = self.cl.preemptive and policy_acts
        greedy = self.cl.scheduler == "greedy"
        idx = self.idx
        while True:
            tops = []
            for b, heap in self.pending.items():
                if b not in blocked:
                    while heap:  # `_top(heap, False)`
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
                alloc = self._fit(idx, job)  # `sim.scheduler`: Slurm's node choice
                if alloc is None and can_preempt:
                    worst = self._top(self.running, True)
                    if worst is None or not worst.key > job.key:
                        can_preempt = False  # nobody ranks below this job or the next
                    elif self._may_make_room(job, now):
                        alloc = self._make_room(job, now)
                        # the service requeues for its best waiting job once per pass
                        can_preempt = not self.cl.one_preemption_per_pass
                if alloc is not None:
                    self._start(job, alloc, now)  # its pending entry goes stale
                    break
                if not greedy:
                    return
                blocked.add(b)
            else:
                return

    def _start(self, job: SimJob, alloc: list[tuple[str, int]], now: float) -> None:
        # a promoted job gets a fresh quantum (and keeps the wait guard's rank a while:
        # `wait_guard_keep`); the service reads the same from its last pass
        # (`starts_promoted`)
        cfg = self.cfg
        facts = job.view(now)
        promoted = starvation_lifts(facts, now, cfg, self.table)
        if not promoted and cfg.wait_guard_keep > 0:
            promoted = wait_guarded(facts, now, cfg, self.table)
        job.begin_stint(now, promoted)
        self.cluster.take(job, alloc)
        self.pending_ver += 1  # it leaves the pending set
        self.n_pending -= 1
        self.running_jobs.add(job)
        self.steps_stale.update(n for n, _ in alloc)
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
        self._push_event(finish, FINISH, job, job.run_ver)
        self._rekey(job, now)

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        self.epoch += 1
        if self.ledger is not None:
            self.ledger.charge(job.user, job.gpus, job.start, now)
        ran = now - job.start
        if self.cl.clock_s:  # whole ticks between the start's and the end's (Slurm's times)
            tick = self.cl.clock_s
            whole = math.floor(now / tick) - math.floor(job.start / tick)
            self.clocked[job.id] = self.clocked.get(job.id, 0.0) + job.gpus * whole * tick
        job.progress = min(job.duration, job.progress + max(0.0, ran - job.overhead) / job.slowdown)
        job.end_stint(now)
        job.running = False
        self.running_jobs.discard(job)
        job.run_ver += 1
        self.cluster.leave(job, release)
        for n, _ in job.alloc:
            self.steps_stale.add(n)
            self.dirty.add(n)
            self.grown.append(n)
        job.alloc = []

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
            self.history.append(
                Completed(job.gpus, gpu_s, job.user, job.name, job.account, job.limit)
            )
            self.since_refresh += 1
            if self.since_refresh >= max(1, min(self.cl.history_refresh, len(self.history) // 4)):
                self._refresh_table(now)

    # ---- inspection -------------------------------------------------------------------
    def active(self) -> list[SimJob]:
        return [j for j in self.jobs if j.finish is None and (j.running or j.key_ver > 0)]

    def views(self, now: float) -> list[JobView]:
        return [j.view(now) for j in self.active()]
