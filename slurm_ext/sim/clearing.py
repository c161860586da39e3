"""The simulator's node-clearing tables and no-room cache: accelerations of the
preemption rule (`sim.preemption`) that give the same answers.

The tables are used only while every running job may be preempted (`choose_victims` is
called directly otherwise); tests/test_sim_preemption.py checks that each clearing
preempts exactly the jobs `choose_victims` picks on the same state.

A failed preemption attempt is not retried while it would fail again. The room a job J
can make (free GPUs plus those of running jobs ranked below J, in all or per node) only
grows when a job stops or a running job's key rises past J's: starts and key drops
shrink it. `no_room`: job id -> (key_ver, ...) as of its last failure; a new key retries.
- Other jobs: (key_ver, epoch); epoch counts stops and rises of running keys. With
  requeue costs they always try again (room grows as they wait).
- Consolidated jobs (a failed clearing changes nothing): (key_ver, entries of `grown`
  seen, nodes that had room, retry gain). `grown` logs the nodes where room may have
  grown: those of a stopped job, and those of a running job whose key rose past a
  blocked job's (blocked_keys: sorted keys of recorded jobs, some stale). Only the nodes
  logged since, and those that had room, are checked again. With requeue costs, room
  also grows once the job's gain (GPUs x wait) covers the requeue of a job the rule
  refused for its cost on a node short of room: the retry gain is the least of those
  jobs' lowest possible cost (restart only); a job that ranks below the waiting one is
  past `min_run_s` (its key would say protected), and opting in and the cap change only
  when a job stops.

Per node, for consolidated jobs: its jobs worst first with their GPU share there, and
need[t] = the best-ranked job that must go for t GPUs to be free there (ABOVE_ALL if t
are free already), rebuilt lazily for nodes marked dirty.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from heapq import heappop, heappush
from operator import itemgetter

from slurm_ext.policy import choose_gpus, min_nodes, requeue_cost_gpu_s
from slurm_ext.sim.cluster import Alloc
from slurm_ext.sim.simjob import SimConfig, SimJob
from slurm_ext.sim.state import ABOVE_ALL, Engine, SimState

INF = math.inf
_first = itemgetter(0)


def all_may_go(every_job_preemptible: bool, state: SimState) -> bool:
    """Whether every running job may always be preempted, so that the all-preemptible
    tables apply: not with a preemption cap, requeue costs or a per-pass requeue cap."""
    rule = state.cfg.max_preemptions > 0 or state.cfg.preemption_cost
    rule = rule or state.cl.max_requeues_per_pass > 0
    return every_job_preemptible and not rule


def max_requeue_cost(jobs: Sequence[SimJob], cl: SimConfig) -> float:
    """The most GPU-seconds a requeue can cost (`requeue_cost_gpu_s`): a waiting job whose
    gain covers it finds every job that may ever go eligible."""
    widest = max((j.gpus for j in jobs), default=0)
    return widest * (cl.checkpoint_interval_s + cl.requeue_restart_s)


class NodeClearing:
    """The clearing tables and the no-room cache of one run; it preempts through the
    engine (`Engine._preempt`)."""

    def __init__(
        self, state: SimState, engine: Engine, all_preemptible: bool, max_lost: float
    ) -> None:
        self.cfg, self.cl, self.engine = state.cfg, state.cl, engine
        cluster = state.cluster
        self.cluster, self.idx, self.free_cpus = cluster, cluster.idx, cluster.free_cpus
        self.on_node, self.node_names, self.node_pos = (
            cluster.on_node,
            cluster.node_names,
            cluster.node_pos,
        )
        self.all_preemptible, self.max_lost = all_preemptible, max_lost
        self.cleared: list[int] = []  # the last clearing's victims (tests)
        # the no-room cache (module docstring): stops and rises of running keys, the
        # nodes where room may have grown, and the keys of the jobs that found none
        self.epoch = 0
        self.no_room: dict[int, tuple] = {}
        self.grown: list[str] = []
        self.blocked_keys: list[tuple] = []
        self.blocked_job: dict[tuple, SimJob] = {}
        self.blocked_limit = 1024
        self.node_worst: dict[str, list[tuple[tuple, int, SimJob]]] = {
            n: [] for n in self.node_names
        }
        # need_by[t * nodes + i] = need[t] of the i-th node (a column per t, so a clearing
        # attempt scans one slice in C; a node's table is written with one slice store)
        self.need_by: list[tuple] = [ABOVE_ALL] * (len(self.node_names) * (self.idx.capacity + 1))
        self.dirty: set[str] = set(self.node_names)  # nodes whose table is stale

    def job_left(self, alloc: Alloc) -> None:
        """A job stopped on `alloc`'s nodes: room grew there."""
        self.epoch += 1
        dirty, grown = self.dirty, self.grown
        for n, _ in alloc:
            dirty.add(n)
            grown.append(n)

    def running_key_rose(self, job: SimJob, old: tuple, key: tuple) -> None:
        """Running `job`'s key rose from `old` to `key`: room grew for the jobs it now
        ranks below. (The keys mark its nodes' tables stale in `dirty` themselves.)"""
        self.epoch += 1
        blocked = self.blocked_keys
        if blocked:
            i = bisect_right(blocked, old)
            if i < len(blocked) and blocked[i] < key:  # old < blocked key < key
                self._rose_past(job, i, bisect_left(blocked, key))

    def no_room_for(self, job: SimJob) -> None:
        """Record a failed attempt for a job that need not consolidate."""
        self.no_room[job.id] = (job.key_ver, self.epoch)

    def may_make_room(self, job: SimJob, now: float) -> bool:
        """False if `Preemption.make_room` would fail as it did last time (`no_room`)."""
        rec = self.no_room.get(job.id)
        if rec is None or rec[0] != job.key_ver:
            return True
        if not job.must_consolidate:
            # with costs, room grows as the job waits: always try again
            return self.cfg.preemption_cost or rec[1] != self.epoch
        if self.cfg.preemption_cost and job.gpus * (now - job.waiting_since) >= rec[3]:
            return True  # its gain now covers a requeue the rule refused it
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
        self.no_room[job.id] = (rec[0], len(grown), tuple(room), rec[3])
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

    def clear_nodes(self, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """Free whole-node room for a consolidated job by preempting lower-ranked jobs.

        As for other jobs, the worst-ranked go first: the nodes picked are those whose
        best-ranked job that must go ranks lowest, and on a picked node jobs go worst
        first, only as many as needed. (Picking the nodes with the fewest GPUs to free
        instead evicted mid-ranked jobs, which restarted at once by preempting the
        lower-ranked ones: chains of same-instant restarts.) The per-node `need` tables
        make each check one key comparison per node. With CPUs on, the nodes are still
        picked by GPUs; on each, jobs go until the job's cores are free as well.
        """
        self.cleared = []  # the victims, for tests
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
            return self.no_room_here(job, ())
        if need_nodes == 1:
            best = [col.index(top)]
        else:
            best = sorted(range(len(col)), key=col.__getitem__, reverse=True)[:need_nodes]
            if not col[best[-1]] > jk:
                names = self.node_names
                return self.no_room_here(job, tuple(names[i] for i in best if col[i] > jk))
        cpg = job.cpus_per_gpu
        for node in (self.node_names[i] for i in best):
            here = self.on_node[node]
            share = [(node, target)]
            for key, _, v in self.node_worst[node]:  # worst first
                if self.cluster.fits(share, cpg) or not key > jk:
                    break
                if v in here:  # not gone already with an earlier node
                    self.engine._preempt(v, now, release=True)
                    self.cleared.append(v.id)
        return choose_gpus(self.idx, job.gpus, True, self.cluster.cpus(job.cpus_per_gpu))

    def clear_eligible(self, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """`choose_victims` for a consolidated job when the rule may leave some running
        jobs (not opted in, capped, or costing more than the job's wait gains): the same
        victims, in the rule's order (worst first).

        The tables leave out the jobs that may never go (`_may_ever_go`), so a node's
        need there is the rule's once the job's gain covers any requeue's cost
        (`max_lost`); before that it bounds the rule's from above (cost-ineligible jobs
        still count), and only the nodes it says could reach the job's GPUs are walked
        (`_walk_needs`). tests/test_sim_clearing.py checks each clearing against
        `choose_victims` on whole runs.
        """
        self.cleared = []
        cap = self.idx.capacity
        need_nodes, target, jk = min_nodes(job.gpus, cap), min(job.gpus, cap), job.key
        if self.dirty:
            self._index_nodes()
        names, node_worst = self.node_names, self.node_worst
        n = len(names)
        col = self.need_by[target * n : (target + 1) * n]
        cfg = self.cfg
        gain = job.gpus * (now - job.waiting_since) if cfg.preemption_cost else None
        if gain is None or gain >= self.max_lost:  # the tables' needs are the rule's
            needs = [(k, p) for p, k in enumerate(col) if k > jk]
            retry = INF
        else:
            needs, retry = self._walk_needs(job, col, now, gain)
        if len(needs) < need_nodes:
            return self.no_room_here(job, tuple(names[p] for _, p in needs), retry)
        needs.sort(key=_first, reverse=True)  # stable: node order among equal needs
        # the victims: on each picked node, worst first until the job's GPUs and cores
        # are free there, counting those the victims picked so far free
        free, cpus = self.idx.free, self.free_cpus
        freed: dict[str, int] = {}
        freed_cpus: dict[str, int] = {}
        want_cpus = target * job.cpus_per_gpu
        gone: dict[SimJob, tuple] = {}
        for _, p in needs[:need_nodes]:
            node = names[p]
            for key, _, v in node_worst[node]:
                if free[node] + freed.get(node, 0) >= target and (
                    cpus is None or cpus[node] + freed_cpus.get(node, 0) >= want_cpus
                ):
                    break
                if not key > jk:
                    break
                if v in gone or not self._may_go_now(v, now, gain):
                    continue
                gone[v] = key
                for m, g in v.alloc:
                    freed[m] = freed.get(m, 0) + g
                    freed_cpus[m] = freed_cpus.get(m, 0) + g * v.cpus_per_gpu
        for v in sorted(gone, key=gone.__getitem__, reverse=True):  # worst first
            self.engine._preempt(v, now, release=True)
            self.cleared.append(v.id)
        if not gone:
            return self.no_room_here(job, tuple(names))
        return choose_gpus(self.idx, job.gpus, True, self.cluster.cpus(job.cpus_per_gpu))

    def _walk_needs(
        self, job: SimJob, col: list[tuple], now: float, gain: float
    ) -> tuple[list[tuple[tuple, int]], float]:
        """(need, node position) in node order of the nodes that can give `job` its GPUs
        with the jobs the rule lets go at this gain, and the gain from which a job it
        refused for its cost might go (its lowest cost: restart only).

        A node's need in the tables (`col`, every job that may ever go) bounds its need
        here from above, so the nodes are walked (worst first, up to their need) in the
        tables' order, and the walk stops once no node left can rank among the picks;
        some needs are then missing, but not those of the nodes picked. When too few
        nodes can give the room all are walked, so the retry gain is complete.
        """
        jk, target = job.key, min(job.gpus, self.idx.capacity)
        need_nodes = min_nodes(job.gpus, self.idx.capacity)
        cands = [(k, p) for p, k in enumerate(col) if k > jk]
        if len(cands) < need_nodes:  # not even with every job that may ever go
            return cands, INF
        cl = self.cl
        every, restart = cl.checkpoint_interval_s, cl.requeue_restart_s
        cheapest = requeue_cost_gpu_s(1, 0.0, every, restart)  # a 1-GPU job's, at best
        if gain < cheapest:  # no requeue is cheap enough yet: only free room counts
            return [(k, p) for k, p in cands if k == ABOVE_ALL], cheapest
        cands.sort(key=_first, reverse=True)  # stable: node order among equal bounds
        names, node_worst, free = self.node_names, self.node_worst, self.idx.free
        cap = self.cfg.max_preemptions
        ok: dict[SimJob, bool] = {}
        needs: list[tuple[tuple, int]] = []
        best: list[tuple] = []  # the need_nodes highest needs found, lowest on top
        retry = INF
        for k, p in cands:
            if len(best) == need_nodes and k < best[0]:
                break  # this node and those after it rank below every pick
            if k == ABOVE_ALL:
                need: tuple | None = k
            else:
                need, room = None, free[names[p]]
                for key, g, v in node_worst[names[p]]:  # worst first
                    if not key > jk:
                        break
                    e = ok.get(v)
                    if e is None:
                        # `_may_go_now` inline (here gain < max_lost: its cost counts)
                        e = v.preemptible and (cap <= 0 or v.preemptions < cap)
                        if e and requeue_cost_gpu_s(v.gpus, now - v.start, every, restart) > gain:
                            e = False
                            retry = min(retry, requeue_cost_gpu_s(v.gpus, 0.0, every, restart))
                        ok[v] = e
                    if e:
                        room += g
                        if room >= target:
                            need = key
                            break
            if need is not None:
                needs.append((need, p))
                heappush(best, need)
                if len(best) > need_nodes:
                    heappop(best)
        needs.sort(key=itemgetter(1))
        return needs, retry

    def _may_go_now(self, v: SimJob, now: float, gain: float | None) -> bool:
        """`policy.preemption.eligible` for running job `v` ranked below a waiting job
        that gains `gain` GPU-seconds (None: costs not weighed): it may ever go, and its
        requeue costs no more (`requeue_cost_gpu_s` on its stint, as `Preemption.running_view`)."""
        if not self._may_ever_go(v):
            return False
        if gain is None or gain >= self.max_lost:
            return True
        cl = self.cl
        lost = requeue_cost_gpu_s(
            v.gpus, now - v.start, cl.checkpoint_interval_s, cl.requeue_restart_s
        )
        return lost <= gain

    def _may_ever_go(self, v: SimJob) -> bool:
        """Whether the rule could ever preempt running job `v` as it is (the part of
        `policy.preemption.eligible` that holds for its whole stint: opted in, under
        the cap; a job ranked below a waiting one is past `min_run_s`, else its key
        would still say protected). True for every job when `all_preemptible`."""
        cap = self.cfg.max_preemptions
        return v.preemptible and (cap <= 0 or v.preemptions < cap)

    def no_room_here(self, job: SimJob, room: tuple[str, ...], retry: float = INF) -> None:
        """Record a failed clearing for `job`; `room`: the nodes that could give it room;
        `retry`: the gain (GPU-seconds) from which requeue costs may let it through."""
        self.no_room[job.id] = (job.key_ver, len(self.grown), room, retry)
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
        all_go, may_ever_go = self.all_preemptible, self._may_ever_go
        for node in self.dirty:
            worst = sorted(
                [(v.key, g, v) for v, g in on_node[node].items()], key=_first, reverse=True
            )
            # need[t] for t <= free is ABOVE_ALL; beyond, the job whose GPUs (worst first)
            # bring the room to t; () (below every key) if even all of them cannot
            need: list[tuple] = [ABOVE_ALL] * (free_of[node] + 1)
            for key, g, v in worst:
                if all_go or may_ever_go(v):
                    need += [key] * g
            if len(need) < cap1:
                need += [()] * (cap1 - len(need))
            node_worst[node] = worst
            need_by[node_pos[node] :: n] = need
        self.dirty.clear()
