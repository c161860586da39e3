"""The one interface the suite uses to talk to Slurm, and the errors it raises.

Two backends implement it: `CliSlurmClient` (squeue/sinfo --json + scontrol, for the
Slurm releases distributions ship) and `PySlurmClient` (pyslurm >= 25.11). Callers catch
`SlurmError` only; its message carries the command and Slurm's own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from slurm_ext.model import Job, Node


class SlurmError(RuntimeError):
    """A Slurm call failed or timed out; `command` says which, `message` what Slurm said."""

    def __init__(self, command: str, message: str) -> None:
        self.command = command
        self.message = message
        super().__init__(f"{command}: {message}")


class SlurmUnavailable(SlurmError):
    """slurmctld did not answer (down, unreachable or too slow)."""


class JobNotFound(SlurmError):
    """The job id is unknown to slurmctld (finished and purged, or never existed)."""


@runtime_checkable
class SlurmClient(Protocol):
    """Reads Slurm state into model dataclasses and writes the knobs Slurm already has."""

    def jobs(self, states: Sequence[str] = ("PENDING", "RUNNING", "SUSPENDED")) -> list[Job]:
        """Jobs in the given states (Slurm state names)."""
        ...

    def nodes(self) -> list[Node]: ...

    def set_priority(self, job_id: int, priority: int) -> None: ...

    def set_site_factor(self, job_id: int, site_factor: int) -> None: ...

    def set_nice(self, job_id: int, nice: int) -> None: ...

    def set_placement(
        self,
        job_id: int,
        required_nodes: Sequence[str] | None = None,
        excluded_nodes: Sequence[str] | None = None,
        num_nodes: int | None = None,
    ) -> None:
        """Pin a pending job's node set; an empty sequence clears that field, None leaves it."""
        ...

    def hold(self, job_id: int) -> None: ...

    def release(self, job_id: int) -> None: ...

    def suspend(self, job_id: int) -> None: ...

    def resume(self, job_id: int) -> None: ...

    def requeue(self, job_id: int) -> None: ...
