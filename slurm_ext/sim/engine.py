"""Event-driven cluster simulator that schedules with the policy core.

Events (a heap): arrivals, completions (or time-limit kills), wake-ups when a job's
priority key changes on its own (queue threshold or Gittins grid crossed, protection
over, starvation promotion, as `policy.key_change_after` says), and the ticks of the
policy's pass interval and of Slurm's backfill pass. After each batch of same-time
events one pass walks the pending jobs best key first: a job starts if `choose_gpus`
finds it room; otherwise, when preemptive, the rule `policy.preemption.choose_victims`
picks the running jobs to requeue so that it fits. What happens to a job that can
neither fit nor preempt depends on `SimConfig.scheduler`: "greedy" skips it (smaller,
lower-ranked jobs may still start), "strict" and "slurm" (Slurm's main scheduler) end
the pass there; "slurm" then lets its backfill pass (`sim.scheduler`, `sim.backfill`)
start lower-ranked jobs that delay no reservation.

Optional CPU dimension (`SimConfig.cpus_per_node`): a job also needs cores, its GPUs on a
node x its cores per GPU, and runs at the speed those cores give its model
(`sim.cpus.cpu_speed`), so a starved job holds its GPUs longer. Off by default, and then
nothing about a run changes.

Keys live in incremental structures, the very keys `policy.priority_key` computes: one
heap of pending jobs per (GPU count, must-consolidate, cores per GPU) bucket (jobs that
need the same room: when the best cannot start, none can) and one heap of running
jobs, worst on top. `order()` reads them back so a test can check them against
`policy.rank` on the same state.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from math import nextafter
from operator import itemgetter

from slurm_ext.model import JobView
from slurm_ext.policy import (
    FreeIndex,
    GittinsTable,
    PolicyConfig,
    build_table,
    choose_gpus,
    network_sensitive,
    spread_slowdown,
)
from slurm_ext.policy.kinds import Completed
from slurm_ext.policy.placement import consolidate_for, min_nodes
from slurm_ext.policy.ranking import key_and_change, starved
from slurm_ext.sim.backfill import NodeSteps
from slurm_ext.sim.clearing import ABOVE_ALL, NodeClearing
from slurm_ext.sim.cpus import cpu_speed, even_share
from slurm_ext.sim.fairshare import fairshare_ledger
from slurm_ext.sim.scheduler import SlurmPasses
from slurm_ext.sim.simjob import SCHEDULERS, SimConfig, SimJob
from slurm_ext.sim.traces import TraceJob

# same-time order: free GPUs first, then arrivals, key changes, the policy's and Slurm's ticks
FINISH, ARRIVE, WAKE, POLICY_TICK, BF_TICK = 0, 1, 2, 3, 4
INF = math.inf
_first = itemgetter(0)

__all__ = ["SCHEDULERS", "SimConfig", "SimJob", "Simulator"]


class Simulator(SlurmPasses, NodeClearing):
    """One run of a trace on a simulated cluster (`run()` returns the jobs, finished)."""

    def __init__(
        self,
        trace: Iterable[TraceJob],
        policy: PolicyConfig,
        cluster: SimConfig,
        on_pass: Callable[[Simulator, float], None] | None = None,
        progress: Callable[[int, int, float], None] | None = None,
    ) -> None:
        # gittins_index "auto": the whole-job index when this cluster does not preempt
        self.cfg, self.cl = policy.for_preemption(cluster.preemptive), cluster
        self.on_pass, self.progress = on_pass, progress
        self.idx = FreeIndex(cluster.gpus_per_node)
        for i in range(cluster.nodes):
            self.idx.set(f"n{i}", cluster.gpus_per_node)
        # free cores per node; None when the CPU dimension is off
        self.free_cpus: dict[str, int] | None = (
            dict.fromkeys(self.idx.free, cluster.cpus_per_node) if cluster.cpus_per_node else None
        )
        trace_jobs = list(trace)
        self.jobs = [self._job(t) for t in trace_jobs]
        self.total_gpus = cluster.nodes * cluster.gpus_per_node
        self.events: list[tuple[float, int, int, int, SimJob]] = []
        self.seq = 0
        self.pending: dict[tuple[int, bool, int], list] = {}
        # bumped whenever a job enters, re-enters or leaves the pending set
        self.pending_ver = 0
        self.best_pending: tuple = ABOVE_ALL
        self.best_pending_at = -1
        self.running: list = []  # (negated key, key_ver, seq, job): worst on top
        # GPU-seconds (cluster.history), (GPUs, GPU-seconds) or Completed records (with
        # the job's kind) of completed jobs
        self.history: deque[float | tuple[int, float] | Completed] = deque(
            cluster.history, maxlen=self.cfg.history_window
        )
        self.since_refresh = 0
        self.table: GittinsTable | None = None
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
        self.on_node: dict[str, dict[SimJob, int]] = {n: {} for n in self.idx.free}
        self.node_worst: dict[str, list[tuple[tuple, int, SimJob]]] = {n: [] for n in self.idx.free}
        # need_by[t * nodes + i] = need[t] of the i-th node (a column per t, so a clearing
        # attempt scans one slice in C; a node's table is written with one slice store)
        self.node_names = list(self.idx.free)
        self.node_pos = {n: i for i, n in enumerate(self.node_names)}
        cap = self.idx.capacity
        self.need_by: list[tuple] = [ABOVE_ALL] * (cluster.nodes * (cap + 1))
        self.dirty: set[str] = set(self.idx.free)
        for j in self.jobs:
            if j.gpus > self.total_gpus:
                raise ValueError(
                    f"job {j.id} needs {j.gpus} GPUs, the cluster has {self.total_gpus}"
                )
        # arrivals wait in submit order outside the heap; each still counts as an event
        # (seq), and at equal times they come after completions and before wake-ups, as
        # the heap's (time, kind, seq) order would put them
        self.arrivals = sorted(self.jobs, key=lambda j: j.submit)
        self.by_id = {j.id: j for j in self.jobs}
        self.seq += len(self.jobs)
        # the clearing tables assume every job below may go: not with a cap or costs
        rule = self.cfg.max_preemptions > 0 or self.cfg.preemption_cost
        rule = rule or cluster.max_requeues_per_pass > 0
        self.all_preemptible = self._draw_preemptible(list(trace_jobs)) and not rule

    def _draw_preemptible(self, trace: list[TraceJob]) -> bool:
        """Mark the jobs that may be preempted; True if all may (see SimConfig)."""
        f = self.cl.preemptible_fraction
        if f is None and not any(t.checkpoint for t in trace):
            return True
        for job, t in zip(self.jobs, trace, strict=True):
            if f is None:
                job.preemptible = t.checkpoint
            else:
                job.preemptible = random.Random(f"{self.cl.seed}:{t.job_id}").random() < f
        return all(j.preemptible for j in self.jobs)

    def _must_consolidate(self, t: TraceJob) -> bool:
        return consolidate_for(self.cl.placement, network_sensitive(t.model_tag))

    def _job(self, t: TraceJob) -> SimJob:
        must = self._must_consolidate(t)
        cl = self.cl
        if not cl.cpus_per_node:
            return SimJob(t, must)
        cpg = t.cpus_per_gpu or even_share(cl.cpus_per_node, cl.gpus_per_node)
        if cpg < 1:
            raise ValueError(f"job {t.job_id}: cpus_per_gpu must be >= 1, got {cpg}")
        # the GPUs it needs on one node: all of them (up to a node's) when consolidated
        per_node = min(t.gpus, cl.gpus_per_node) if must else 1
        if per_node * cpg > cl.cpus_per_node:
            raise ValueError(
                f"job {t.job_id} needs {per_node * cpg} cores on a node "
                f"({per_node} GPUs x {cpg}), a node has {cl.cpus_per_node}"
            )
        return SimJob(t, must, cpg, cpu_speed(t.model_tag, cpg, cl.cpu_knees))

    # ---- resources ----------------------------------------------------------------
    def _cpus(self, cpus_per_gpu: int) -> tuple[dict[str, int], int] | None:
        """What `choose_gpus` needs to count cores too (None when CPUs are off)."""
        return None if self.free_cpus is None else (self.free_cpus, cpus_per_gpu)

    def _take(self, alloc: list[tuple[str, int]], cpus_per_gpu: int) -> None:
        self.idx.take(alloc)
        if self.free_cpus is not None:
            for n, g in alloc:
                self.free_cpus[n] -= g * cpus_per_gpu

    def _give(self, alloc: list[tuple[str, int]], cpus_per_gpu: int) -> None:
        self.idx.give(alloc)
        if self.free_cpus is not None:
            for n, g in alloc:
                self.free_cpus[n] += g * cpus_per_gpu

    def _fits(self, alloc: list[tuple[str, int]], cpus_per_gpu: int) -> bool:
        """Whether `alloc`'s GPUs (and cores, when counted) are free right now."""
        free, cpus = self.idx.free, self.free_cpus
        if cpus is None:
            return all(free[n] >= g for n, g in alloc)
        return all(free[n] >= g and cpus[n] >= g * cpus_per_gpu for n, g in alloc)

    # ---- events -------------------------------------------------------------------
    def _push_event(self, when: float, kind: int, job: SimJob, ver: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, ver, job))

    def run(self) -> list[SimJob]:
        events = self.events
        arrivals = self.arrivals
        n = len(self.jobs)
        ai = 0
        next_arrival = arrivals[0].submit if arrivals else math.inf
        rekey = self._rekey
        preemptive = self.cl.preemptive
        every = self.cl.pass_interval_s  # the policy acts at its multiples (0: every event)
        passes = 0
        while events or ai < n:
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
            while next_arrival == now:
                job = arrivals[ai]
                ai += 1
                next_arrival = arrivals[ai].submit if ai < n else math.inf
                self.n_pending += 1
                self._rekey(job, now)
                need_pass = True
            policy_tick = bf_tick = False
            while events and events[0][0] == now:
                _, kind, _, ver, job = heappop(events)
                if kind == POLICY_TICK:
                    policy_tick, self.policy_due = True, None
                    continue
                if kind == BF_TICK:
                    bf_tick, self.bf_due = True, None
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
            if need_pass or self.dynamic or policy_tick:
                self._pass(now, not every or policy_tick)
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

    # ---- keys ---------------------------------------------------------------------
    def _rekey(self, job: SimJob, now: float, wake: bool = False) -> None:
        """Recompute the job's key, file it in its heap and schedule its next change.

        wake: called by the job's own wake-up; if its key came out unchanged (rounding
        left the crossing just short, or the index does not move at that grid point), its
        heap entry stays valid and is kept.
        """
        old = job.key
        running = job.running
        fs = 1.0 if self.ledger is None else self.ledger.at(job.user, now, self.running_jobs)
        # the numbers `job.view(now)` would hold, without building it
        if running:
            ran = now - job.start
            key, after = key_and_change(
                self.cfg,
                self.table,
                now,
                job.id,
                job.gpus,
                job.submit,
                job.attained + job.gpus * ran,
                job.executed + ran,
                True,
                ran,
                None,
                job.promoted_at,
                job.duration,
                job.user,
                job.name,
                job.account,
                job.limit,
                fs,
            )
        else:
            key, after = key_and_change(
                self.cfg,
                self.table,
                now,
                job.id,
                job.gpus,
                job.submit,
                job.attained,
                job.executed,
                False,
                job.last_run,
                job.waiting_since,
                None,
                job.duration,
                job.user,
                job.name,
                job.account,
                job.limit,
                fs,
            )
        if not wake or key != old:
            job.key = key
            ver = job.key_ver = job.key_ver + 1
            self.seq += 1
            if running:
                if key > old:
                    self.epoch += 1
                    blocked = self.blocked_keys
                    if blocked:
                        i = bisect_right(blocked, old)
                        if i < len(blocked) and blocked[i] < key:  # old < blocked key < key
                            self._rose_past(job, i, bisect_left(blocked, key))
                heappush(
                    self.running,
                    ((-key[0], -key[1], -key[2], -key[3], -key[4]), ver, self.seq, job),
                )
                dirty = self.dirty
                for n, _ in job.alloc:
                    dirty.add(n)
            else:
                b = (job.gpus, job.must_consolidate, job.cpus_per_gpu)
                bucket = self.pending.get(b)
                if bucket is None:
                    bucket = self.pending[b] = []
                heappush(bucket, (key, ver, self.seq, job))
                self.pending_ver += 1
        if after < INF and not (running and self.dynamic):
            # at the exact crossing; if rounding leaves it just short, the wake re-arms
            at = now + after
            every = self.cl.pass_interval_s
            if every > 0:  # the policy re-ranks at its passes only
                at = math.ceil(at / every) * every
            soonest = nextafter(now, INF)
            if soonest > at:  # max(at, soonest)
                at = soonest
            seq = self.seq = self.seq + 1
            heappush(self.events, (at, WAKE, seq, job.key_ver, job))

    def _refresh_table(self, now: float) -> None:
        active = [e[3] for b in self.pending.values() for e in b if e[1] == e[3].key_ver]
        active += [e[3] for e in self.running if e[1] == e[3].key_ver]
        censored = None
        if self.cfg.gittins_censored:  # what rank() would read off the active views
            censored = [
                (j.gpus, j.attained + j.gpus * (now - j.start) if j.running else j.attained)
                for j in active
            ]
        self.table = build_table(list(self.history), self.cfg, censored)
        self.since_refresh = 0
        self.pending = {}
        self.pending_ver += 1
        self.running = []
        for job in active:
            self._rekey(job, now)

    # ---- scheduling pass ----------------------------------------------------------
    def _top(self, heap: list, running: bool) -> SimJob | None:
        while heap:
            _, ver, _, job = heap[0]
            if ver == job.key_ver and job.running == running and job.finish is None:
                return job
            heapq.heappop(heap)
        return None

    def _outranked(self, key: tuple) -> bool:
        """Whether some pending job ranks above `key` (the best pending key is cached
        until the pending set changes: `pending_ver`)."""
        if not self.cl.preemptive:
            return False
        if self.best_pending_at != self.pending_ver:
            best = ABOVE_ALL
            for heap in self.pending.values():
                top = self._top(heap, False)
                if top is not None and top.key < best:
                    best = top.key
            self.best_pending, self.best_pending_at = best, self.pending_ver
        return self.best_pending < key

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
                alloc = choose_gpus(
                    idx, job.gpus, job.must_consolidate, self._cpus(job.cpus_per_gpu)
                )
                if alloc is None and can_preempt:
                    worst = self._top(self.running, True)
                    if worst is None or not worst.key > job.key:
                        can_preempt = False  # nobody ranks below this job or the next
                    elif self._may_make_room(job):
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
        # a promoted job gets a fresh quantum
        job.begin_stint(
            now, starved(False, job.last_run, job.waiting_since, job.submit, now, self.cfg)
        )
        self._take(alloc, job.cpus_per_gpu)
        self.pending_ver += 1  # it leaves the pending set
        self.n_pending -= 1
        self.running_jobs.add(job)
        for n, g in alloc:
            self.on_node[n][job] = g
            self.steps_stale.add(n)
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
        job.progress = min(job.duration, job.progress + max(0.0, ran - job.overhead) / job.slowdown)
        job.end_stint(now)
        job.running = False
        self.running_jobs.discard(job)
        job.run_ver += 1
        if release:
            self._give(job.alloc, job.cpus_per_gpu)
        for n, _ in job.alloc:
            del self.on_node[n][job]
            self.steps_stale.add(n)
            self.dirty.add(n)
            self.grown.append(n)
        job.alloc = []

    def _preempt(self, job: SimJob, now: float, release: bool = False) -> None:
        self._stop(job, now, release=release)
        job.preemptions += 1
        self.preemptions += 1
        self.n_pending += 1
        every = self.cl.checkpoint_interval_s
        if every > 0:  # it resumes from its last checkpoint
            kept = math.floor(job.progress / every) * every
            self.lost_work_gpu_s += (job.progress - kept) * job.gpus
            job.progress = kept
        job.waiting_since = now
        if self.cl.requeue_delay_s > 0:  # Slurm holds it (begin time): re-filed on a wake
            job.key, job.key_ver = (), job.key_ver + 1
            self._push_event(now + self.cl.requeue_delay_s, WAKE, job, job.key_ver)
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
            self.history.append(
                Completed(job.gpus, job.attained, job.user, job.name, job.account, job.limit)
            )
            self.since_refresh += 1
            if self.since_refresh >= max(1, min(self.cl.history_refresh, len(self.history) // 4)):
                self._refresh_table(now)

    # ---- inspection -------------------------------------------------------------------
    def active(self) -> list[SimJob]:
        return [j for j in self.jobs if j.finish is None and (j.running or j.key_ver > 0)]

    def order(self) -> list[int]:
        """Job ids in the order the incremental structures hold them (best first)."""
        keyed = [
            (e[0], e[3].id)
            for b in self.pending.values()
            for e in b
            if e[1] == e[3].key_ver and not e[3].running
        ]
        keyed += [
            (tuple(-x for x in e[0]), e[3].id)
            for e in self.running
            if e[1] == e[3].key_ver and e[3].running
        ]
        return [i for _, i in sorted(keyed)]

    def views(self, now: float) -> list[JobView]:
        return [j.view(now) for j in self.active()]
