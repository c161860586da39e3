"""Node agents for a co-location replay (`slurm_ext.replay.sharing.replay_coloc`).

One real `Agent` per replay node, each on its own `SimulatedGpuReader` that the replay's
GPU model fills (`publish`), sampling every `interval_s` in a thread. Classes come from
the job's partition in its environment (`opp` is opportunistic; the replay's cluster is
ours, so the environment is trusted here), no reports are sent. Here, not in slurm_ext:
the agent may import slurm_ext, never the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig, ColocationConfig, GpuConfig, JobsConfig
from nodeagent.gpu import GpuProcess, SimulatedGpuReader
from slurm_ext.core.model import JobClasses
from slurm_ext.replay.sharing import SHARE_PARTITION


@dataclass
class ReplayAgents:
    slow_fraction: float = 0.7
    interval_s: float = 1.0  # 5 s on a site; the replay's jobs last tens of seconds
    nodes: Sequence[str] = ()
    agents: dict[str, Agent] = field(default_factory=dict)
    readers: dict[str, SimulatedGpuReader] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def config(self, node: str, workdir: Path, gpus: int) -> AgentConfig:
        return AgentConfig(
            node_name=node,
            interval_s=self.interval_s,
            state_file=str(workdir / f"agent-{node}.json"),
            gpu=GpuConfig(backend="simulated", simulated_count=gpus),
            colocation=ColocationConfig(slow_fraction=self.slow_fraction),
            jobs=JobsConfig(source="environ"),
        )

    def start(self, nodes: Sequence[str], workdir: Path, gpus_per_node: int) -> None:
        self.nodes = list(nodes)
        for node in self.nodes:
            self.readers[node] = SimulatedGpuReader(gpus_per_node)
            agent = Agent(
                self.config(node, workdir, gpus_per_node),
                self.readers[node],
                classes=JobClasses(opportunistic_partitions=(SHARE_PARTITION,)),
            )
            self.agents[node] = agent
            t = threading.Thread(target=agent.run, args=(self._stop,), daemon=True)
            self._threads.append(t)
            t.start()

    def publish(
        self, node: str, index: int, busy: float, watts: float, procs: list[tuple[int, int, float]]
    ) -> None:
        processes = {pid: GpuProcess(pid, mem, util) for pid, mem, util in procs}
        self.readers[node].set_gpu(index, util=busy, power_w=watts, processes=processes)

    def actions(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for agent in self.agents.values():
            for (kind, _code), n in agent.snapshot.action_counts.items():
                out[kind] = out.get(kind, 0) + n
        return out

    def stop(self) -> None:
        """Stop the agents; each thaws what it froze on its way out (`Agent.run`)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
