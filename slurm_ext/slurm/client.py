"""The one interface the suite uses to talk to Slurm, and the errors it raises.

Two backends implement it: `CliSlurmClient` (squeue/sinfo --json + scontrol, for the
Slurm releases distributions ship) and `PySlurmClient` (pyslurm >= 25.11). Callers catch
`SlurmError` only; its message carries the command and Slurm's own words.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from slurm_ext.core.model import Cluster, CompletedJob, Job, Node

log = logging.getLogger("slurm_ext.slurm")
T = TypeVar("T")


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

    def private_data(self) -> frozenset[str]:
        """slurm.conf's PrivateData as the running slurmctld has it ("jobs", "users",
        ...; empty for none): what Slurm hides from users about others."""
        ...

    def cluster(self) -> Cluster:
        """The nodes and the partitions (their nodes, MaxTime, default flag, state), with
        each node's GPU type, memory and weight: what a policy needs to know which nodes a
        job may use."""
        ...

    def completed_jobs(self, since: float) -> list[CompletedJob]:
        """GPU jobs that ran and ended since `since` (unix s), from Slurm's accounting;
        SlurmError (with Slurm's words) where there is none."""
        ...

    def set_priority(self, job_id: int, priority: int) -> None: ...

    def set_site_factor(self, job_id: int, site_factor: int) -> None: ...

    def set_priorities(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        """`set_priority` for many jobs: the ones that failed, each with its error.
        Raises SlurmUnavailable (nothing said of which were written) when slurmctld stops
        answering; writing the same value again is harmless."""
        ...

    def set_site_factors(self, values: Mapping[int, int]) -> dict[int, SlurmError]:
        """`set_site_factor` for many jobs, as `set_priorities`."""
        ...

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


def parse_private_data(value: str) -> frozenset[str]:
    """`PrivateData` as Slurm prints it ("jobs,usage,users", "none", "") as a set."""
    items = {v.strip().lower() for v in value.split(",")}
    return frozenset(items - {"", "none", "(null)"})


def map_records(
    records: Iterable[Any],
    mapper: Callable[[Any], T],
    source: str,
    what: str,
    ident: Callable[[Any], object],
) -> list[T]:
    """Map every record a backend read; skip an unreadable one, naming it in a warning.

    One odd job or node must not stop the service from ranking all the others.
    """
    out = []
    for rec in records:
        try:
            out.append(mapper(rec))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("%s: skipping unreadable %s %r: %s", source, what, ident(rec), exc)
    return out


def write_each(
    write: Callable[[int, int], None], values: Mapping[int, int]
) -> dict[int, SlurmError]:
    """One call per job; failures collected, SlurmUnavailable stops the loop (the rest
    would only wait for the same timeout)."""
    failed: dict[int, SlurmError] = {}
    for job_id, value in values.items():
        try:
            write(job_id, value)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            failed[job_id] = exc
    return failed
