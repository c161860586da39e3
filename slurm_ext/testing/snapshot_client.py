"""A SlurmClient over a fixed snapshot, for benchmarks and tests of the service shell.

It answers reads from the snapshot it was given and counts writes instead of sending
them: the service's pass can then be timed and checked without a slurmctld.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_ext.core.model import Cluster, CompletedJob, Job, Node, Partition


class ReplayClient:
    def __init__(
        self, jobs: Sequence[Job], nodes: Sequence[Node], completed: Sequence[CompletedJob] = ()
    ) -> None:
        self.jobs_snapshot, self.nodes_snapshot = list(jobs), list(nodes)
        self.completed = list(completed)  # what its accounting holds
        self.writes = 0
        self.private = frozenset[str]()  # its slurm.conf's PrivateData

    def private_data(self) -> frozenset[str]:
        return self.private

    def jobs(self, states: Sequence[str] = ()) -> list[Job]:
        return self.jobs_snapshot

    def nodes(self) -> list[Node]:
        return self.nodes_snapshot

    def cluster(self) -> Cluster:
        """The snapshot's nodes and the partitions they name (no limits: none known)."""
        members: dict[str, list[str]] = {}
        for node in self.nodes_snapshot:
            for part in node.partitions:
                members.setdefault(part, []).append(node.name)
        parts = tuple(Partition(name, tuple(names)) for name, names in members.items())
        return Cluster(nodes=tuple(self.nodes_snapshot), partitions=parts)

    def completed_jobs(self, since: float) -> list[CompletedJob]:
        return [j for j in self.completed if j.end_time >= since]

    def _write(self, *args: object, **kwargs: object) -> None:
        self.writes += 1

    def _write_many(self, values: Mapping[int, int]) -> dict:
        self.writes += len(values)
        return {}

    set_priority = set_site_factor = set_nice = set_placement = _write
    set_priorities = set_site_factors = _write_many
    hold = release = suspend = resume = requeue = _write
