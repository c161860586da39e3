"""The simulator's priority keys, kept incrementally: the very keys
`policy.key_and_change` computes from each job's facts (`SimJob.view`), and when each
changes on its own, for a wake-up at that moment.

One heap of pending jobs per (GPU count, must-consolidate, cores per GPU) bucket (jobs
that need the same room: when the best cannot start, none can) and one heap of running
jobs, worst on top. Entries carry the job's `key_ver`: an entry whose version is not the
job's is stale and dropped when it reaches the top. `order()` reads the heaps back so a
test can check them against `policy.rank` on the same state.

What the keys read lives here too: the Gittins table and the history it is built from,
each job's kind table (`choices`) and Slurm's fair-share usage (`ledger`).

Not the service's key cache (service/rank_cache.py): every re-key here follows an event
or the wake-up `key_and_change` asked for, so an id-keyed cache of keys would never hit
and only add its lookups; what the two share is `key_and_change` itself.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from heapq import heapify, heappop, heappush
from math import nextafter

from slurm_ext.core.model import Completed
from slurm_ext.policy import Choice, GittinsTable, build_table, key_and_change
from slurm_ext.sim.clearing import NodeClearing
from slurm_ext.sim.fairshare import fairshare_ledger
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.state import ABOVE_ALL, WAKE, Engine, SimState

INF = math.inf
# the running heap is compacted when it outgrows max(this, twice its live size)
RUNNING_MIN = 1024
Bucket = tuple[int, bool, int]  # (GPUs, must consolidate, cores per GPU)
# GPU-seconds, (GPUs, GPU-seconds) or Completed records (with the job's kind) of
# completed jobs (`SimConfig.history`)
HistoryEntry = float | tuple[int, float] | Completed


class KeyedQueues:
    """The pending buckets and the running heap of one run, and the keys' updates. A
    job is re-keyed through the engine (`Engine._rekey`), which calls `rekey`."""

    def __init__(
        self,
        state: SimState,
        clearing: NodeClearing,
        engine: Engine,
        jobs: Sequence[SimJob],
        history: Iterable[HistoryEntry],
    ) -> None:
        self.st, self.clearing, self.engine = state, clearing, engine
        self.dirty = clearing.dirty  # the nodes whose clearing tables are stale
        cfg = self.cfg = state.cfg
        self.every = state.cl.pass_interval_s  # the policy re-ranks at its multiples
        self.pending: dict[Bucket, list] = {}  # (key, key_ver, seq, job): best on top
        # bumped whenever a job enters, re-enters or leaves the pending set
        self.pending_ver = 0
        self.best_pending: tuple = ABOVE_ALL  # `outranked`'s cache, as of best_pending_at
        self.best_pending_at = -1
        self.running: list = []  # (negated key, key_ver, seq, job): worst on top
        self.running_cap = RUNNING_MIN  # `compact_running` past this many entries
        self.dynamic = cfg.policy == "srtf"  # running keys change continuously
        self.history: deque[HistoryEntry] = deque(history, maxlen=cfg.history_window)
        self.since_refresh = 0  # completions since the table was built
        self.table: GittinsTable | None = None
        if cfg.policy == "gittins" and self.history:
            self.table = build_table(list(self.history), cfg)
        self.choices: dict[SimJob, Choice] = {}  # each job's kind tables
        # Slurm's fair-share usage per user, when keys read it (policy/fairshare.py)
        self.ledger = fairshare_ledger(cfg, jobs)

    def rekey(self, job: SimJob, now: float, wake: bool = False) -> None:
        """Recompute the job's key, file it in its heap and schedule its next change.

        wake: called by the job's own wake-up; if its key came out unchanged (rounding
        left the crossing just short, or the index does not move at that grid point), its
        heap entry stays valid and is kept.
        """
        old = job.key
        running = job.running
        st = self.st
        ledger = self.ledger
        fs = 1.0 if ledger is None else ledger.at(job.user, now, st.running_jobs)
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
            st.seq += 1
            if running:
                if key > old:  # room grows for the jobs it now ranks below
                    self.clearing.running_key_rose(job, old, key)
                dirty = self.dirty
                for n, _ in job.alloc:  # its nodes' clearing tables are stale
                    dirty.add(n)
                heap = self.running
                heappush(heap, ((-key[0], -key[1], -key[2], -key[3], -key[4]), ver, st.seq, job))
                if len(heap) > self.running_cap:
                    self.compact_running()
            else:
                b = (job.gpus, job.must_consolidate, job.cpus_per_gpu)
                bucket = self.pending.get(b)
                if bucket is None:
                    bucket = self.pending[b] = []
                heappush(bucket, (key, ver, st.seq, job))
                self.pending_ver += 1
        if after < INF and not (running and self.dynamic):
            # at the exact crossing; if rounding leaves it just short, the wake re-arms
            at = now + after
            every = self.every
            if every > 0:  # the policy re-ranks at its passes only
                at = math.ceil(at / every) * every
            soonest = nextafter(now, INF)
            if soonest > at:  # max(at, soonest)
                at = soonest
            seq = st.seq = st.seq + 1
            heappush(st.events, (at, WAKE, seq, job.key_ver, job))

    def compact_running(self) -> None:
        """Drop the stale entries of the running heap, in place: each key change of a
        running job (a wake-up at every Gittins grid point) files a new entry and leaves
        the old one, so between history refreshes the heap held some 10 entries per
        running job (bursty). Live entries have distinct keys: their order stays."""
        heap = self.running
        heap[:] = [e for e in heap if e[1] == e[3].key_ver and e[3].running]
        heapify(heap)
        self.running_cap = max(RUNNING_MIN, 2 * len(heap))

    def completed(self, record: Completed, now: float) -> None:
        """A job completed (`record`: its history entry): rebuild the Gittins table
        after `history_refresh` completions (sooner while the history is small: every
        25% growth)."""
        self.history.append(record)
        self.since_refresh += 1
        if self.since_refresh >= max(1, min(self.st.cl.history_refresh, len(self.history) // 4)):
            self.refresh_table(now)

    def refresh_table(self, now: float) -> None:
        """Rebuild the Gittins table from the history and re-key every active job."""
        active = [e[3] for b in self.pending.values() for e in b if e[1] == e[3].key_ver]
        active += [e[3] for e in self.running if e[1] == e[3].key_ver]
        self.table = build_table(list(self.history), self.cfg, lazy=True)
        self.choices.clear()
        self.since_refresh = 0
        self.pending.clear()
        self.pending_ver += 1
        self.running.clear()
        for job in active:
            self.engine._rekey(job, now)

    def top(self, heap: list, running: bool) -> SimJob | None:
        """The job on top of a pending bucket or the running heap, stale entries dropped."""
        while heap:
            _, ver, _, job = heap[0]
            if ver == job.key_ver and job.running == running and job.finish is None:
                return job
            heappop(heap)
        return None

    def outranked(self, key: tuple) -> bool:
        """Whether some pending job ranks above `key` (the best pending key is cached
        until the pending set changes: `pending_ver`)."""
        if not self.st.cl.preemptive:
            return False
        if self.best_pending_at != self.pending_ver:
            best = ABOVE_ALL
            for heap in self.pending.values():
                top = self.top(heap, False)
                if top is not None and top.key < best:
                    best = top.key
            self.best_pending, self.best_pending_at = best, self.pending_ver
        return self.best_pending < key

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
