"""What the simulator's parts share within one run, defined apart from all of them so
that each imports it and none imports another back.

`SimState`: the configs, the cluster, the event heap and its sequence numbers, the
running jobs and the count of waiting ones. `Engine`: the job transitions a part asks
the engine (`sim.engine.Simulator`) to make; a subclass of the engine may extend them
(co-location does: sim/coloc.py), so a part calls them on the engine, never its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappush
from typing import Protocol

from slurm_ext.policy import PolicyConfig
from slurm_ext.sim.cluster import Alloc, ClusterState
from slurm_ext.sim.simjob import SimConfig, SimJob

# event kinds; at equal times the heap pops them in this order: free GPUs first, then
# arrivals, key changes, the policy's and Slurm's ticks
FINISH, ARRIVE, WAKE, POLICY_TICK, BF_TICK, SCHED_TICK = 0, 1, 2, 3, 4, 5
# (time, kind, seq, the job's run_ver or key_ver when filed, job; None for a tick)
Event = tuple[float, int, int, int, "SimJob | None"]
INF = math.inf
ABOVE_ALL = (2,)  # compares above every key (keys start with 0 or 1): "nothing to preempt"


@dataclass(eq=False, slots=True)
class SimState:
    """One run's state that more than one part reads or writes."""

    cfg: PolicyConfig  # the policy, "auto" settings resolved for this cluster
    cl: SimConfig
    cluster: ClusterState
    by_id: dict[int, SimJob]
    events: list[Event] = field(default_factory=list)  # a heap
    # events and heap entries filed so far: each takes the next number, which orders
    # equal times and keys (the total order every decision follows)
    seq: int = 0
    n_pending: int = 0  # jobs arrived and not running (pending, or held after a requeue)
    running_jobs: set[SimJob] = field(default_factory=set)

    def push_event(self, when: float, kind: int, job: SimJob | None, ver: int) -> None:
        self.seq += 1
        heappush(self.events, (when, kind, self.seq, ver, job))


class Engine(Protocol):
    """The job transitions the parts ask of the engine (`Simulator`)."""

    def _start(self, job: SimJob, alloc: Alloc, now: float) -> None: ...

    def _preempt(self, job: SimJob, now: float, release: bool = False) -> None: ...

    def _rekey(self, job: SimJob, now: float, wake: bool = False) -> None: ...
