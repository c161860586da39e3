"""Event-driven cluster simulator that schedules with the policy core.

Events (a heap): arrivals, completions, and wake-ups when a job's priority key changes on
its own (queue threshold or Gittins grid crossed, protection over, starvation promotion),
as `policy.key_change_after` says. After each batch of same-time events one pass walks
the pending jobs best key first: a job starts if `choose_gpus` finds it room; otherwise,
when preemptive, the worst-ranked running jobs below it are preempted until it fits
(victims it does not need are left running). A job that can neither fit nor preempt is
skipped for this pass (smaller, lower-ranked jobs may still start).

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
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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
from slurm_ext.sim.cpus import DEFAULT_KNEES, cpu_speed, even_share
from slurm_ext.sim.traces import TraceJob

FINISH, ARRIVE, WAKE = 0, 1, 2  # same-time order: free GPUs first
INF = math.inf
_first = itemgetter(0)
ABOVE_ALL = (2,)  # compares above every key (keys start with 0 or 1): "nothing to preempt"


@dataclass
class SimConfig:
    """The simulated cluster and its mechanics.

    restart_overhead_s: wall time a preempted job loses when it restarts (checkpoint
        reload, warm-up); counted as GPU time held, not as progress.
    history_refresh: rebuild the Gittins table after this many completions at most
        (sooner while the history is small: every 25% growth).
    history: jobs completed before the trace starts (e.g. a YARN sample): GPU-seconds,
        (GPUs, GPU-seconds) for per-GPU-class Gittins tables (`gittins_classes`), or
        `Completed` records with their kind for per-kind tables (`gittins_kinds`).
    backfill: when the best pending job can neither start nor preempt, let lower-ranked
        jobs that fit start anyway (first fit, no reservation). False models Slurm's
        sched/builtin: strict priority order, the blocked job holds everyone behind it.
    cpus_per_node: cores per node; None or 0 leaves CPUs out (GPUs only). When set, a job
        takes its cores per GPU (`TraceJob.cpus_per_gpu`, default the even share
        cpus_per_node // gpus_per_node) on each of its nodes, and runs at
        cpu_speed(model, cores per GPU, cpu_knees).
    cpu_knees: per model, the cores per GPU at which its GPU saturates.
    """

    nodes: int = 8
    gpus_per_node: int = 8
    preemptive: bool = True
    placement: str = "consolidate"
    restart_overhead_s: float = 30.0
    history_refresh: int = 1000
    history: list[float | tuple[int, float] | Completed] = field(default_factory=list)
    backfill: bool = True
    cpus_per_node: int | None = None
    cpu_knees: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_KNEES))


class SimJob:
    __slots__ = (
        "id", "gpus", "submit", "duration", "model", "user", "partition", "must_consolidate",
        "progress", "attained", "executed", "running", "start", "last_run", "waiting_since",
        "alloc", "slowdown", "overhead", "key", "key_ver", "run_ver", "finish", "stints",
        "preemptions", "first_start", "promoted_at", "cpus_per_gpu", "speed", "name",
        "account", "limit",
    )  # fmt: skip

    def __init__(
        self, t: TraceJob, must_consolidate: bool, cpus_per_gpu: int = 0, speed: float = 1.0
    ) -> None:
        self.id, self.gpus, self.submit, self.duration = (
            t.job_id,
            t.gpus,
            t.submit_time,
            t.duration_s,
        )
        self.model, self.user, self.partition = t.model_tag, t.user, t.partition
        # its kind: what the conditioned Gittins index reads (never its duration)
        self.name, self.account, self.limit = t.job_name, t.account, t.time_limit_s
        self.must_consolidate = must_consolidate
        self.progress = 0.0  # work seconds done (at full speed)
        self.attained = 0.0  # GPU-seconds held, before the current stint
        self.executed = 0.0  # wall seconds held, before the current stint
        self.running = False
        self.start = 0.0
        self.last_run = 0.0
        self.waiting_since = t.submit_time
        self.alloc: list[tuple[str, int]] = []
        self.slowdown = 1.0
        self.overhead = 0.0
        self.key: tuple = ()
        self.key_ver = 0
        self.run_ver = 0
        self.finish: float | None = None
        self.stints = 0
        self.preemptions = 0
        self.first_start: float | None = None
        self.promoted_at: float | None = None
        self.cpus_per_gpu = cpus_per_gpu  # cores per GPU held while running; 0: not counted
        self.speed = speed  # work seconds per wall second from its cores (1: not starved)

    def view(self, now: float) -> JobView:
        ran = now - self.start if self.running else 0.0
        return JobView(
            job_id=self.id,
            gpus=self.gpus,
            submit_time=self.submit,
            attained_gpu_s=self.attained + self.gpus * ran,
            executed_s=self.executed + ran,
            running=self.running,
            last_run_s=ran if self.running else self.last_run,
            waiting_since=None if self.running else self.waiting_since,
            user=self.user,
            partition=self.partition,
            model_tag=self.model,
            true_duration_s=self.duration,
            promoted_at_gpu_s=self.promoted_at if self.running else None,
            job_name=self.name,
            account=self.account,
            time_limit_s=self.limit,
        )


class Simulator:
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
        self.jobs = [self._job(t) for t in trace]
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
        self.dynamic = policy.policy == "srtf"  # running keys change continuously
        self.preemptions = 0
        self.done = 0
        # A failed preemption attempt is not retried while it would fail again. The room
        # a job J can make (free GPUs plus those of running jobs ranked below J, in all or
        # per node) only grows when a job stops or a running job's key rises past J's:
        # starts and key drops shrink it. no_room: job id -> (key_ver, ...) as of its last
        # failure; a new key retries.
        # - Other jobs: (key_ver, epoch); epoch counts stops and rises of running keys.
        #   (Their failed attempt reorders the FreeIndex buckets, which placement ties
        #   read, so these attempts are kept exactly as they were.)
        # - Consolidated jobs (a failed clearing changes nothing): (key_ver, entries of
        #   `grown` seen, nodes that had room). `grown` logs the nodes where room may have
        #   grown: those of a stopped job, and those of a running job whose key rose past
        #   a blocked job's (blocked_keys: sorted keys of recorded jobs, some stale). Only
        #   the nodes logged since, and those that had room, are checked again.
        self.epoch = 0
        self.grown: list[str] = []
        self.blocked_keys: list[tuple] = []
        self.blocked_job: dict[tuple, SimJob] = {}
        self.blocked_limit = 1024
        self.no_room: dict[int, tuple] = {}
        self.on_node: dict[str, dict[SimJob, int]] = {n: {} for n in self.idx.free}
        # per node, for consolidated jobs: its jobs worst first with their GPU share there,
        # and need[t] = the best-ranked job that must go for t GPUs to be free there
        # (ABOVE_ALL if t are free already). Rebuilt lazily for nodes marked dirty.
        # (filled in node order: ties between nodes go to the first, whatever the hash seed)
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
        self.seq += len(self.jobs)

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
                self._rekey(job, now)
                need_pass = True
            while events and events[0][0] == now:
                _, _, _, ver, job = heappop(events)  # WAKE
                if ver == job.key_ver and job.finish is None:
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
            if need_pass or self.dynamic:
                self._pass(now)
                if self.on_pass is not None:
                    self.on_pass(self, now)
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

    def _pass(self, now: float) -> None:
        if self.dynamic and self.running and self.cl.preemptive:
            live = [e[3] for e in self.running if e[1] == e[3].key_ver and e[3].running]
            self.running = []
            for job in live:
                self._rekey(job, now)
        blocked: set[tuple[int, bool, int]] = set()
        can_preempt = self.cl.preemptive
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
                if alloc is not None:
                    self._start(job, alloc, now)  # its pending entry goes stale
                    break
                if not self.cl.backfill:
                    return
                blocked.add(b)
            else:
                return

    def _may_make_room(self, job: SimJob) -> bool:
        """False if `_make_room` would fail as it did last time (see `no_room`)."""
        rec = self.no_room.get(job.id)
        if rec is None or rec[0] != job.key_ver:
            return True
        if not job.must_consolidate:
            return rec[1] != self.epoch
        grown = self.grown
        if rec[1] == len(grown):
            return False
        # room can have grown only on the nodes logged since; with those that had room
        # then, are there enough nodes now?
        # (room on a node: its free GPUs and those of its jobs ranked below this one;
        # the same test as need[target] > key, without rebuilding the node's table)
        nodes = set(grown[rec[1] :])
        nodes.update(rec[2])
        cap = self.idx.capacity
        target = min(job.gpus, cap)
        free_of, on_node, jk = self.idx.free, self.on_node, job.key
        room = []
        for n in nodes:
            r = free_of[n]
            if r < target:
                for v, g in on_node[n].items():
                    if v.key > jk:
                        r += g
                if r < target:
                    continue
            room.append(n)
        if len(room) >= min_nodes(job.gpus, cap):
            return True
        self.no_room[job.id] = (rec[0], len(grown), tuple(room))
        return False

    def _rose_past(self, job: SimJob, i: int, j: int) -> None:
        """Running `job`'s key rose past blocked_keys[i:j]: log its nodes if one of
        those jobs is still blocked with that key, else drop the stale keys."""
        blocked, blocked_job = self.blocked_keys, self.blocked_job
        for k in blocked[i:j]:
            b = blocked_job[k]
            if b.key == k and not b.running and b.finish is None:
                self.grown.extend([n for n, _ in job.alloc])
                return
        for k in blocked[i:j]:
            del blocked_job[k]
        del blocked[i:j]

    def _make_room(self, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """Preempt running jobs ranked below `job` until it fits; None if they cannot make room.

        A job that must consolidate needs whole nodes' worth of room: the nodes whose
        lower-ranked jobs free the most are cleared, worst jobs first. Others take the
        worst-ranked jobs anywhere. Victims whose GPUs end up unused keep running.
        """
        if job.must_consolidate:
            return self._clear_nodes(job, now)
        victims: list[tuple] = []
        alloc = None
        while alloc is None:
            top = self._top(self.running, True)
            if top is None or not top.key > job.key:
                break
            victims.append(heapq.heappop(self.running))
            self._give(top.alloc, top.cpus_per_gpu)
            if self.idx.total_free >= job.gpus:
                alloc = choose_gpus(
                    self.idx, job.gpus, job.must_consolidate, self._cpus(job.cpus_per_gpu)
                )
        if alloc is not None:
            self._take(alloc, job.cpus_per_gpu)
        for entry in reversed(victims):  # best victims first: keep whoever still fits
            v = entry[3]
            if alloc is None or self._fits(v.alloc, v.cpus_per_gpu):
                self._take(v.alloc, v.cpus_per_gpu)
                heapq.heappush(self.running, entry)
            else:
                self._preempt(v, now)  # its GPUs (and cores) were given back above
        if alloc is not None:
            self._give(alloc, job.cpus_per_gpu)  # _start takes it again
        else:
            self.no_room[job.id] = (job.key_ver, self.epoch)
        return alloc

    def _clear_nodes(self, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """Free whole-node room for a consolidated job by preempting lower-ranked jobs.

        As for other jobs, the worst-ranked go first: the nodes picked are those whose
        best-ranked job that must go ranks lowest, and on a picked node jobs go worst
        first, only as many as needed. (Picking the nodes with the fewest GPUs to free
        instead evicted mid-ranked jobs, which restarted at once by preempting the
        lower-ranked ones: chains of same-instant restarts.) The per-node `need` tables
        make each check one key comparison per node. With CPUs on, the nodes are still
        picked by GPUs; on each, jobs go until the job's cores are free as well.
        """
        need_nodes = min_nodes(job.gpus, self.idx.capacity)
        target = min(job.gpus, self.idx.capacity)
        jk = job.key
        if self.dirty:
            self._index_nodes()
        # a node can give `target` GPUs iff the best job that must go for it ranks below
        # `jk`; when need_nodes > 1, target is a whole node
        # the need_nodes nodes with the lowest-ranked needs (ties: node order), all of which
        # must rank below the job
        n = len(self.node_names)
        col = self.need_by[target * n : (target + 1) * n]
        top = max(col)  # the first node's, among equals
        if not top > jk:
            return self._no_room_here(job, ())
        if need_nodes == 1:
            best = [col.index(top)]
        else:
            best = sorted(range(len(col)), key=col.__getitem__, reverse=True)[:need_nodes]
            if not col[best[-1]] > jk:
                names = self.node_names
                return self._no_room_here(job, tuple(names[i] for i in best if col[i] > jk))
        cpg = job.cpus_per_gpu
        for node in (self.node_names[i] for i in best):
            here = self.on_node[node]
            share = [(node, target)]
            for key, _, v in self.node_worst[node]:  # worst first
                if self._fits(share, cpg) or not key > jk:
                    break
                if v in here:  # not gone already with an earlier node
                    self._preempt(v, now, release=True)
        return choose_gpus(self.idx, job.gpus, True, self._cpus(job.cpus_per_gpu))

    def _no_room_here(self, job: SimJob, room: tuple[str, ...]) -> None:
        """Record a failed clearing for `job`; `room`: the nodes that could give it room."""
        self.no_room[job.id] = (job.key_ver, len(self.grown), room)
        blocked, jk = self.blocked_keys, job.key
        i = bisect_left(blocked, jk)
        if i == len(blocked) or blocked[i] != jk:
            blocked.insert(i, jk)
            self.blocked_job[jk] = job
            if len(blocked) > self.blocked_limit:  # drop the stale keys
                live = {
                    k: b
                    for k, b in self.blocked_job.items()
                    if b.key == k and not b.running and b.finish is None
                }
                self.blocked_job = live
                self.blocked_keys = sorted(live)
                self.blocked_limit = max(1024, 2 * len(live))

    def _index_nodes(self) -> None:
        """Rebuild the per-node clearing tables of the nodes whose jobs or keys changed."""
        cap1 = self.idx.capacity + 1
        free_of = self.idx.free
        on_node, node_worst, node_pos = self.on_node, self.node_worst, self.node_pos
        need_by = self.need_by
        n = len(self.node_names)

        for node in self.dirty:
            worst = sorted(
                [(v.key, g, v) for v, g in on_node[node].items()], key=_first, reverse=True
            )
            # need[t] for t <= free is ABOVE_ALL; beyond, the job whose GPUs (worst first)
            # bring the room to t; () (below every key) if even all of them cannot
            need: list[tuple] = [ABOVE_ALL] * (free_of[node] + 1)
            for key, g, _ in worst:
                need += [key] * g
            if len(need) < cap1:
                need += [()] * (cap1 - len(need))
            node_worst[node] = worst
            need_by[node_pos[node] :: n] = need
        self.dirty.clear()

    def _start(self, job: SimJob, alloc: list[tuple[str, int]], now: float) -> None:
        if starved(
            False, job.last_run, job.waiting_since, job.submit, now, self.cfg
        ):  # a promoted job gets a fresh quantum
            job.promoted_at = job.attained
        self._take(alloc, job.cpus_per_gpu)
        self.pending_ver += 1  # it leaves the pending set
        for n, g in alloc:
            self.on_node[n][job] = g
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
        self._push_event(finish, FINISH, job, job.run_ver)
        self._rekey(job, now)

    def _stop(self, job: SimJob, now: float, release: bool = True) -> None:
        self.epoch += 1
        ran = now - job.start
        job.progress = min(job.duration, job.progress + max(0.0, ran - job.overhead) / job.slowdown)
        job.attained += job.gpus * ran
        job.executed += ran
        job.last_run = ran
        job.running = False
        job.promoted_at = None
        job.run_ver += 1
        if release:
            self._give(job.alloc, job.cpus_per_gpu)
        for n, _ in job.alloc:
            del self.on_node[n][job]
            self.dirty.add(n)
            self.grown.append(n)
        job.alloc = []

    def _preempt(self, job: SimJob, now: float, release: bool = False) -> None:
        self._stop(job, now, release=release)
        job.preemptions += 1
        self.preemptions += 1
        job.waiting_since = now
        self._rekey(job, now)

    def _complete(self, job: SimJob, now: float) -> None:
        self._stop(job, now)
        job.finish = now
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
