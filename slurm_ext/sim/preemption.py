"""The simulator's preemption choice: the one rule (`policy.preemption.choose_victims`,
which the service calls too) on the simulator's state.

A pending job that cannot fit asks `make_room`: the running jobs ranked below it are
read worst first off the running heap (only as far as the rule reads them) and the
victims it picks are requeued by the engine (`Engine._preempt`). A job that must
consolidate, while every running job may be preempted, takes the node-clearing tables
instead (sim/clearing.py), which pick the same victims faster;
tests/test_sim_preemption.py checks both against the service.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from heapq import heappop
from operator import itemgetter

from slurm_ext.policy import RunningJob, WaitingJob, choose_gpus, choose_victims, requeue_cost_gpu_s
from slurm_ext.sim.clearing import NodeClearing
from slurm_ext.sim.cluster import Alloc
from slurm_ext.sim.keys import KeyedQueues
from slurm_ext.sim.simjob import SimJob
from slurm_ext.sim.state import Engine, SimState

_first = itemgetter(0)


class Preemption:
    """Who is requeued for a job that cannot fit, on one run's state."""

    def __init__(
        self, state: SimState, keys: KeyedQueues, clearing: NodeClearing, engine: Engine
    ) -> None:
        self.cfg, self.cl, self.cluster = state.cfg, state.cl, state.cluster
        self.by_id = state.by_id
        self.keys, self.clearing, self.engine = keys, clearing, engine
        self.verify_victims = False  # tests: check the clearing tables against the rule

    def make_room(self, job: SimJob, now: float) -> Alloc | None:
        """Preempt the running jobs `choose_victims` picks for `job`; its GPUs, or None if
        they cannot make room.

        For a job that must consolidate the clearing tables (sim/clearing.py) pick the
        same victims faster.
        """
        clearing = self.clearing
        if job.must_consolidate and self.cl.max_requeues_per_pass > 0:
            # the service's cap (its worst `cap` victims a pass) is not in the tables
            victims = self.rule_victims(job, now)
            if not victims:
                clearing.no_room_here(job, tuple(self.cluster.node_names))
                return None
            for v in victims:
                self.engine._preempt(self.by_id[v], now, release=True)
            return choose_gpus(
                self.cluster.idx, job.gpus, True, self.cluster.cpus(job.cpus_per_gpu)
            )
        if job.must_consolidate:
            want = self.rule_victims(job, now) if self.verify_victims else None
            if clearing.all_preemptible:
                alloc = clearing.clear_nodes(job, now)
                got, want = sorted(clearing.cleared), sorted(want or ())
            else:
                alloc = clearing.clear_eligible(job, now)
                got = clearing.cleared  # in the rule's order too
            if self.verify_victims and got != want:
                raise AssertionError(
                    f"job {job.id}: the clearing preempted {got}, choose_victims picks {want}"
                )
            return alloc
        return self.requeue_below(job, now)

    def requeue_below(self, job: SimJob, now: float) -> Alloc | None:
        """Requeue the victims the rule picks off the running heap for `job`, a job that
        need not consolidate; its GPUs where it fits now, else None."""
        popped: list[tuple] = []
        victims = self.victims(job, self.pop_below(job, now, popped), now)
        gone = set(victims)
        running = self.keys.running
        for entry in popped:
            if entry[3].id in gone:
                self.engine._preempt(entry[3], now, release=True)
            else:
                heapq.heappush(running, entry)
        if not victims:
            self.clearing.no_room_for(job)
            return None
        # Slurm starts it only where it fits as asked
        cpus = self.cluster.cpus(job.cpus_per_gpu)
        return choose_gpus(self.cluster.idx, job.gpus, job.must_consolidate, cpus)

    def rule_victims(self, job: SimJob, now: float) -> list[int]:
        """`choose_victims` for `job` read off every running job (tests: the clearing
        tables must agree with it)."""
        below = sorted(
            (e for e in self.keys.running if e[1] == e[3].key_ver and e[3].running), key=_first
        )
        return self.victims(
            job, [self.running_view(e[3], now) for e in below if e[3].key > job.key], now
        )

    def pop_below(self, job: SimJob, now: float, popped: list[tuple]) -> Iterator[RunningJob]:
        """The running jobs ranked below `job`, worst first, popped off the running heap as
        they are read (into `popped`)."""
        keys = self.keys
        running = keys.running
        while True:
            top = keys.top(running, True)
            if top is None or not top.key > job.key:
                return
            popped.append(heappop(running))
            yield self.running_view(top, now)

    def running_view(self, job: SimJob, now: float) -> RunningJob:
        """Running `job` as the rule reads it."""
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

    def victims(self, job: SimJob, below: Iterable[RunningJob], now: float) -> list[int]:
        """`choose_victims` on the simulator's state (the one rule the service uses too)."""
        gain = None
        if self.cfg.preemption_cost:
            gain = job.gpus * (now - job.waiting_since)
        waiting = WaitingJob(job.id, job.gpus, job.must_consolidate, job.cpus_per_gpu, gain)
        victims = choose_victims(
            waiting,
            below,
            self.cluster.idx.free,
            self.cluster.idx.capacity,
            self.cfg.min_run_s,
            self.cluster.free_cpus,
            self.cfg.max_preemptions,
        )
        cap = self.cl.max_requeues_per_pass  # the service's cap: the worst go first
        return victims[:cap] if cap > 0 else victims
