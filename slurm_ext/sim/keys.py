"""The simulator's priority keys, kept incrementally: the very keys
`policy.key_and_change` computes from each job's facts (`SimJob.view`), and when each
changes on its own, for a wake-up at that moment.

One heap of pending jobs per (GPU count, must-consolidate, cores per GPU) bucket (jobs
that need the same room: when the best cannot start, none can) and one heap of running
jobs, worst on top. Entries carry the job's `key_ver`: an entry whose version is not the
job's is stale and dropped when it reaches the top. `order()` reads the heaps back so a
test can check them against `policy.rank` on the same state.

Not the service's key cache (service/rank_cache.py): every re-key here follows an event
or the wake-up `key_and_change` asked for, so an id-keyed cache of keys would never hit
and only add its lookups; what the two share is `key_and_change` itself.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from heapq import heapify, heappop, heappush
from math import nextafter
from typing import TYPE_CHECKING

from slurm_ext.policy import build_table
from slurm_ext.policy.ranking import key_and_change
from slurm_ext.sim.clearing import ABOVE_ALL

if TYPE_CHECKING:
    from slurm_ext.sim.engine import Simulator
    from slurm_ext.sim.simjob import SimJob

INF = math.inf
WAKE = 2  # event kind (engine.py)
# the running heap is compacted when it outgrows max(this, twice its live size)
RUNNING_MIN = 1024


class KeyedQueues:
    """Mixin of `Simulator`: the pending buckets and the running heap, and key updates."""

    def _rekey(self: Simulator, job: SimJob, now: float, wake: bool = False) -> None:
        """Recompute the job's key, file it in its heap and schedule its next change.

        wake: called by the job's own wake-up; if its key came out unchanged (rounding
        left the crossing just short, or the index does not move at that grid point), its
        heap entry stays valid and is kept.
        """
        old = job.key
        running = job.running
        fs = 1.0 if self.ledger is None else self.ledger.at(job.user, now, self.running_jobs)
        facts = job.view(now)  # kept per wait or stint, moved on while it runs
        table = self.table
        if table is not None and table.kinds is not None:
            # the table `own_table` would pick, from the job's kind choice (`choices`: kept
            # until the table is refreshed, then emptied, so no old table stays alive)
            choice = self.choices.get(job)
            if choice is None:
                choice = self.choices[job] = table.kinds.choose(
                    job.gpus, job.user, job.name, job.account, job.limit
                )
            own = choice.pick(facts.attained_gpu_s)
            if own.samples:  # the same key from its own table (no kinds: read as is)
                table = own
        key, after = key_and_change(facts, now, self.cfg, table, fs)
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
                heap = self.running
                heappush(heap, ((-key[0], -key[1], -key[2], -key[3], -key[4]), ver, self.seq, job))
                if len(heap) > self.running_cap:
                    self._compact_running()
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

    def _compact_running(self: Simulator) -> None:
        """Drop the stale entries of the running heap, in place: each key change of a
        running job (a wake-up at every Gittins grid point) files a new entry and leaves
        the old one, so between history refreshes the heap held some 10 entries per
        running job (bursty). Live entries have distinct keys: their order stays."""
        heap = self.running
        heap[:] = [e for e in heap if e[1] == e[3].key_ver and e[3].running]
        heapify(heap)
        self.running_cap = max(RUNNING_MIN, 2 * len(heap))

    def _refresh_table(self: Simulator, now: float) -> None:
        active = [e[3] for b in self.pending.values() for e in b if e[1] == e[3].key_ver]
        active += [e[3] for e in self.running if e[1] == e[3].key_ver]
        self.table = build_table(list(self.history), self.cfg, lazy=True)
        self.choices.clear()
        self.since_refresh = 0
        self.pending = {}
        self.pending_ver += 1
        self.running = []
        for job in active:
            self._rekey(job, now)

    def _top(self: Simulator, heap: list, running: bool) -> SimJob | None:
        while heap:
            _, ver, _, job = heap[0]
            if ver == job.key_ver and job.running == running and job.finish is None:
                return job
            heappop(heap)
        return None

    def _outranked(self: Simulator, key: tuple) -> bool:
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

    def order(self: Simulator) -> list[int]:
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
