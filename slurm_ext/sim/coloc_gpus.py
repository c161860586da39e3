"""The co-location simulator's GPUs: who is on each and what changed since the agents
and the speeds last looked (`GpuShares`, which its parts share: sim/coloc.py,
sim/coloc_agents.py, sim/coloc_place.py), and what they draw over time (`Meter`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_ext.sim.coloc_model import Gpu, GpuKey, Track
from slurm_ext.sim.simjob import SimJob


@dataclass(eq=False)
class GpuShares:
    """Each GPU's occupants, each running job's GPUs and progress, and the pauses."""

    gpus: dict[GpuKey, Gpu]
    gpus_per_node: int
    placed: dict[SimJob, list[GpuKey]] = field(default_factory=dict)
    track: dict[SimJob, Track] = field(default_factory=dict)
    paused: set[SimJob] = field(default_factory=set)  # paused by any node's agent
    # each agent resumes only what it paused (it freezes the job's processes on its own
    # node, which stalls the whole job)
    node_paused: dict[str, set[SimJob]] = field(default_factory=dict)
    paused_since: dict[int, float] = field(default_factory=dict)  # opportunistic job id
    changed: set[str] = field(default_factory=set)  # nodes whose agent must look again
    stale: bool = True  # occupants or pauses changed since the speeds were last set
    # the GPUs whose jobs' speeds (`dirty_gpus`) and whose jobs' rates and power
    # (`respeed_gpus`) are stale
    dirty_gpus: set[GpuKey] = field(default_factory=set)
    respeed_gpus: set[GpuKey] = field(default_factory=set)

    @staticmethod
    def of(nodes: Iterable[str], gpus_per_node: int) -> GpuShares:
        """Every node's GPUs, empty."""
        names = list(nodes)
        gpus = {(n, i): Gpu() for n in names for i in range(gpus_per_node)}
        return GpuShares(gpus, gpus_per_node, node_paused={n: set() for n in names})

    def node_gpus(self, node: str) -> list[GpuKey]:
        return [(node, i) for i in range(self.gpus_per_node)]

    def touch(self, keys: Sequence[GpuKey]) -> None:
        """These GPUs' occupants or pauses changed: their speeds and power are stale."""
        self.stale = True
        self.dirty_gpus.update(keys)
        self.respeed_gpus.update(keys)


@dataclass(eq=False)
class Meter:
    """The GPUs' power now and its integrals since the run began, and what each running
    job's agent would have measured (`Track.sums`)."""

    watts: float  # all GPUs' power now (idle ones at idle power)
    tracks: Mapping[SimJob, Track]  # the running jobs' (`GpuShares.track`)
    t_last: float = 0.0  # the integrals run to here
    energy_j: float = 0.0
    held_energy_j: float = 0.0  # GPUs that hold a job only (idle ones as if powered off)
    held_watts: float = 0.0
    holding: int = 0  # GPUs holding a job now
    held_gpu_s: float = 0.0  # integral of `holding`
    busy: float = 0.0  # the GPUs' summed busy fraction now
    busy_gpu_s: float = 0.0  # integral of `busy`
    gpu_watts: dict[GpuKey, float] = field(default_factory=dict)  # active GPUs only
    gpu_busy: dict[GpuKey, float] = field(default_factory=dict)
    held_gpus: set[GpuKey] = field(default_factory=set)

    def advance(self, now: float) -> None:
        """Integrate up to `now`."""
        dt = now - self.t_last
        if dt > 0:
            self.energy_j += self.watts * dt
            self.held_energy_j += self.held_watts * dt
            self.busy_gpu_s += self.busy * dt
            self.held_gpu_s += self.holding * dt
            for tr in self.tracks.values():
                s = tr.sums
                base = 3 if tr.shared else 0
                s[base] += dt
                s[base + 1] += tr.util * dt
                s[base + 2] += tr.watts * dt
                if tr.shared:
                    s[6] += tr.speed * dt
            self.t_last = now
