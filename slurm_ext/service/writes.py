"""The service's writes to Slurm: values, placement pins and requeues, with their tally.

Split from the pass (`slurm_ext.service.loop`) because it is the one place the service changes
Slurm: a write that Slurm refuses is logged and counted, and tried again next pass (the
store records only what took); `SlurmUnavailable` is re-raised so that the pass stops
writing instead of waiting for the same timeout once per job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from slurm_ext.core.model import Job
from slurm_ext.slurm.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.slurm.hostlist import compress_hostlist
from slurm_ext.store.rows import DecisionRecord

log = logging.getLogger("slurm_ext.service.loop")


class Tally(Protocol):
    """Where a pass counts writes that took and writes Slurm refused (its PassResult)."""

    writes: int
    errors: int


class SlurmWrites:
    """Writes through `client` in `mode` ("site_factor" or "priority"). Keeps, across
    passes, the jobs whose lost site factor it wrote again (once per service run)."""

    def __init__(self, client: SlurmClient, mode: str) -> None:
        self.client = client
        self.mode = mode
        self.rewritten: set[int] = set()

    def forget(self, active_ids: Iterable[int]) -> None:
        """Drop what is remembered of jobs that left the queue."""
        self.rewritten.intersection_update(active_ids)

    def current_values(
        self, targets: Sequence[Job], stored: dict[int, DecisionRecord]
    ) -> dict[int, int | None]:
        """What each job holds now. Priority mode reads Slurm's own value (an admin may have
        changed it). Site-factor mode trusts what we last wrote (22.05's JSON lacks the
        site factor) unless Slurm's priority shows it cannot hold it: multifactor adds
        the site factor to non-negative weighted factors less a positive nice, so a
        priority + nice below it means Slurm lost the write (a reset, a restore). Such a
        job is written again once per service run; a priority an admin fixed below the
        value would otherwise be rewritten every pass."""
        if self.mode == "priority":
            return {j.job_id: j.priority for j in targets}
        out: dict[int, int | None] = {}
        for j in targets:
            value = stored[j.job_id].value if j.job_id in stored else None
            # priority 0: not known (a held job's, or a backend that does not read it)
            lost = value is not None and 0 < j.priority + max(j.nice, 0) < value
            if lost and j.job_id not in self.rewritten:
                self.rewritten.add(j.job_id)
                log.info("job %d: Slurm does not hold site factor %d; writing it again",
                         j.job_id, value)  # fmt: skip
                value = None
            out[j.job_id] = value
        return out

    def values(self, tally: Tally, planned: dict[int, int]) -> dict[int, int]:
        """Write the planned values in one batch call; the ones that took."""
        if not planned:
            return {}
        if self.mode == "priority":
            failed = self.client.set_priorities(planned)
        else:
            failed = self.client.set_site_factors(planned)
        for exc in failed.values():
            log.warning("write failed, will retry next pass: %s", exc)
        tally.errors += len(failed)
        tally.writes += len(planned) - len(failed)
        return {j: v for j, v in planned.items() if j not in failed}

    def set_placement(
        self, job_id: int, hint: tuple[str, ...] | None, names: Sequence[str]
    ) -> None:
        """Keep a waiting job to the nodes of `hint` (None: lift the service's pin) by
        excluding every other node. Not ReqNodeList: on a job Slurm started since the
        pass read the queue, slurmctld reads ReqNodeList as a resize of the running job
        (seen live: it shrank a two-node job to one), where it refuses a new ExcNodeList for
        a job that is no longer pending (tests/test_placement_live.py, 22.05 and 25.11)."""
        others = [n for n in names if n not in (hint or ())]
        if hint is not None and not others:
            return  # a pin to every node restricts nothing
        self.client.set_placement(
            job_id, excluded_nodes=[compress_hostlist(others)] if hint is not None else []
        )

    def call(self, tally: Tally, fn: Callable[..., object], *args: object) -> bool:
        """One write (`fn(*args)`): whether it took; a refusal is logged and counted."""
        try:
            fn(*args)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            tally.errors += 1
            log.warning("write failed, will retry next pass: %s", exc)
            return False
        tally.writes += 1
        return True
