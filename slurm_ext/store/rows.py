"""The rows the service keeps per job and per decision, as frozen records.

`Store` reads and writes them; the service's fold (`slurm_ext.service.fold`), the rank cache
and the user view build new ones with `copy_with`, which a pass calls for nearly every
job and so skips the dataclass __init__.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from slurm_ext.core.attained import Attained, Stint


@dataclass(frozen=True)
class JobRecord:
    job_id: int
    user: str
    partition: str
    name: str
    model_tag: str | None
    gpus: int
    submit_time: float
    closed_gpu_s: float
    closed_run_s: float
    last_run_s: float
    run_start: float | None
    waiting_since: float | None
    last_seen: float
    state: str
    done: bool
    # attained service when a starvation promotion started the current stint (else None)
    promoted_at_gpu_s: float | None = None
    # the open stint's GPU-seconds before seg_start, when its GPU count last changed
    open_gpu_s: float = 0.0
    seg_start: float | None = None  # None: the count has not changed since run_start

    @property
    def stint(self) -> Stint | None:
        if self.run_start is None:
            return None
        seg = self.run_start if self.seg_start is None else self.seg_start
        return Stint(self.run_start, self.gpus, seg, self.open_gpu_s)

    @property
    def attained(self) -> Attained:
        """The job's attained service, as the columns persist it."""
        return Attained(
            self.closed_gpu_s,
            self.closed_run_s,
            self.last_run_s,
            self.stint,
            self.promoted_at_gpu_s,
        )

    def with_attained(self, a: Attained, **changes: Any) -> JobRecord:
        """This record holding `a`, with other `changes` (its stint's GPU count is the
        record's `gpus`, which the caller keeps equal)."""
        s = a.stint
        return replace(
            self,
            closed_gpu_s=a.closed_gpu_s,
            closed_run_s=a.closed_run_s,
            last_run_s=a.last_run_s,
            run_start=s.start if s is not None else None,
            promoted_at_gpu_s=a.promoted_at_gpu_s,
            open_gpu_s=s.earlier_gpu_s if s is not None else 0.0,
            seg_start=s.seg_start if s is not None and s.seg_start != s.start else None,
            **changes,
        )

    def seen(self, now: float) -> JobRecord:
        """This record, seen again at `now` with nothing else changed (every pass, for
        nearly every job)."""
        return copy_with(self, last_seen=now)

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds so far: finished stints plus the one running now."""
        if self.run_start is None:
            return self.closed_gpu_s
        return self.attained.gpu_s(now)

    def executed_s(self, now: float) -> float:
        current = max(0.0, now - self.run_start) if self.run_start else 0.0
        return self.closed_run_s + current


@dataclass(frozen=True)
class DecisionRecord:
    job_id: int
    rank: int
    queue: int
    gittins: float
    promoted: bool
    reason: str
    value: int | None
    mode: str
    placement: tuple[str, ...] | None
    decided_at: float
    group: str = ""  # the history group the Gittins index came from ("" if none)
    group_samples: int = 0  # completed jobs in that group
    slurm_reason: str = ""  # Slurm's reason for the job's state at that pass

    def reranked(self, rank: int) -> DecisionRecord:
        """The same decision at another position in the order (most waiting jobs move
        every pass as running jobs pass them)."""
        return copy_with(self, rank=rank)


def copy_with(rec: Any, **changes: Any) -> Any:
    """A copy of a frozen record with `changes`, made by copying its fields rather than
    running its dataclass __init__ (which has no checks to skip): a pass does this for
    nearly every one of 55,000 jobs, and `dataclasses.replace` is ten times slower."""
    new = object.__new__(type(rec))
    new.__dict__.update(rec.__dict__)
    new.__dict__.update(changes)
    return new
