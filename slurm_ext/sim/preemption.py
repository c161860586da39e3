"""The simulator's preemption choice: the one rule (`policy.preemption.choose_victims`,
which the service calls too) on the simulator's state, and the requeue it leads to.

A pending job that cannot fit asks `_make_room`: the running jobs ranked below it are
read worst first off the running heap (only as far as the rule reads them) and the
victims it picks are requeued. A job that must consolidate, while every running job may
be preempted, takes the node-clearing tables instead (sim/clearing.py), which pick the
same victims faster; tests/test_sim_preemption.py checks both against the service.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from heapq import heappop
from operator import itemgetter
from typing import TYPE_CHECKING

from slurm_ext.policy import choose_gpus
from slurm_ext.policy.preemption import (
    RunningJob,
    WaitingJob,
    choose_victims,
    requeue_cost_gpu_s,
)
from slurm_ext.sim.keys import WAKE

if TYPE_CHECKING:
    from slurm_ext.sim.engine import Simulator
    from slurm_ext.sim.simjob import SimJob

_first = itemgetter(0)


class Preemption:
    """Mixin of `Simulator`: who is requeued for a job that cannot fit, and the requeue."""

    def _make_room(self: Simulator, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """Preempt the running jobs `choose_victims` picks for `job`; its GPUs, or None if
        they cannot make room.

        For a job that must consolidate the clearing tables (sim/clearing.py) pick the
        same victims faster.
        """
        if job.must_consolidate and self.cl.max_requeues_per_pass > 0:
            # the service's cap (its worst `cap` victims a pass) is not in the tables
            victims = self._rule_victims(job, now)
            if not victims:
                self._no_room_here(job, tuple(self.node_names))
                return None
            for v in victims:
                self._preempt(self.by_id[v], now, release=True)
            return choose_gpus(self.idx, job.gpus, True, self.cluster.cpus(job.cpus_per_gpu))
        if job.must_consolidate:
            want = self._rule_victims(job, now) if self.verify_victims else None
            if self.all_preemptible:
                alloc = self._clear_nodes(job, now)
                got, want = sorted(self.cleared), sorted(want or ())
            else:
                alloc = self._clear_eligible(job, now)
                got = self.cleared  # in the rule's order too
            if self.verify_victims and got != want:
                raise AssertionError(
                    f"job {job.id}: the clearing preempted {got}, choose_victims picks {want}"
                )
            return alloc
        return self._requeue_below(job, now)

    def _requeue_below(self: Simulator, job: SimJob, now: float) -> list[tuple[str, int]] | None:
        """Requeue the victims the rule picks off the running heap for `job`, a job that
        need not consolidate; its GPUs where it fits now, else None."""
        popped: list[tuple] = []
        victims = self._victims(job, self._pop_below(job, now, popped), now)
        gone = set(victims)
        for entry in popped:
            if entry[3].id in gone:
                self._preempt(entry[3], now, release=True)
            else:
                heapq.heappush(self.running, entry)
        if not victims:
            self.no_room[job.id] = (job.key_ver, self.epoch)
            return None
        # Slurm starts it only where it fits as asked
        cpus = self.cluster.cpus(job.cpus_per_gpu)
        return choose_gpus(self.idx, job.gpus, job.must_consolidate, cpus)

    def _rule_victims(self: Simulator, job: SimJob, now: float) -> list[int]:
        """`choose_victims` for `job` read off every running job (tests: the clearing
        tables must agree with it)."""
        below = sorted(
            (e for e in self.running if e[1] == e[3].key_ver and e[3].running), key=_first
        )
        return self._victims(
            job, [self._running_view(e[3], now) for e in below if e[3].key > job.key], now
        )

    def _pop_below(
        self: Simulator, job: SimJob, now: float, popped: list[tuple]
    ) -> Iterator[RunningJob]:
        """The running jobs ranked below `job`, worst first, popped off the running heap as
        they are read (into `popped`)."""
        while True:
            top = self._top(self.running, True)
            if top is None or not top.key > job.key:
                return
            popped.append(heappop(self.running))
            yield self._running_view(top, now)

    def _running_view(self: Simulator, job: SimJob, now: float) -> RunningJob:
        lost = 0.0
        if self.cfg.preemption_cost:  # estimated as the service does: from its stint's start
            cl = self.cl
            ran = now - job.start
            # Slurm's hold of a requeued job delays it as a restart does
            lost = requeue_cost_gpu_s(job.gpus, ran, cl.checkpoint_interval_s, cl.requeue_restart_s)
        return RunningJob(
            job.id,
            tuple(job.alloc),
            job.preemptible,
            now - job.start,
            False,
            job.cpus_per_gpu,
            lost,
            job.preemptions,
        )

    def _victims(
        self: Simulator, job: SimJob, below: Iterable[RunningJob], now: float
    ) -> list[int]:
        """`choose_victims` on the simulator's state (the one rule the service uses too)."""
        gain = None
        if self.cfg.preemption_cost:
            gain = job.gpus * (now - job.waiting_since)
        waiting = WaitingJob(job.id, job.gpus, job.must_consolidate, job.cpus_per_gpu, gain)
        victims = choose_victims(
            waiting,
            below,
            self.idx.free,
            self.idx.capacity,
            self.cfg.min_run_s,
            self.free_cpus,
            self.cfg.max_preemptions,
        )
        cap = self.cl.max_requeues_per_pass  # the service's cap: the worst go first
        return victims[:cap] if cap > 0 else victims

    def _preempt(self: Simulator, job: SimJob, now: float, release: bool = False) -> None:
        """Requeue `job`: it stops, loses the work since its last checkpoint and waits."""
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
