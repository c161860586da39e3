"""Attained service of a job: its closed run stints and the open one, each part charged
at the GPUs it held.

One pure value (`Attained`) for every shell that accounts service: the service folds
Slurm's snapshots into it (`slurm_ext.service.fold`), its store persists it (`JobRecord`
columns), the simulator's jobs keep one (`SimJob.service`). A stint is split into
segments at every change of its GPU count: the owner of a running job can shrink it
(`scontrol update NumNodes=1`), and charging the whole stint at the new count would cut
the service already recorded. The moment of a
change is only known to lie between the pass that last saw the old count and the one
that sees the new count; that gap is charged at the larger of the two, so a job's
attained service never decreases.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stint:
    """An open run stint: started at `start`, holding `gpus` since `seg_start`."""

    start: float  # Slurm's StartTime, or the moment a suspended job resumed
    gpus: int
    seg_start: float  # since when `gpus` have been held; charged from here
    earlier_gpu_s: float = 0.0  # GPU-seconds of the stint before seg_start

    @classmethod
    def begin(cls, start: float, gpus: int) -> Stint:
        return cls(start=start, gpus=gpus, seg_start=start)

    def gpu_s(self, now: float) -> float:
        """GPU-seconds of this stint up to `now`."""
        return self.earlier_gpu_s + max(0.0, now - self.seg_start) * self.gpus

    def run_s(self, now: float) -> float:
        return max(0.0, now - self.start)

    def resized(self, gpus: int, last_seen: float, now: float) -> Stint:
        """The stint after a pass at `now` saw `gpus` where the pass at `last_seen` saw
        `self.gpus`; the gap between the two is charged at the larger count."""
        if gpus <= 0 or gpus == self.gpus:
            return self
        cut = now if gpus < self.gpus else min(max(last_seen, self.seg_start), now)
        return Stint(self.start, gpus, cut, self.gpu_s(cut))


@dataclass(frozen=True, slots=True)
class Attained:
    """What a job has received: closed stints' totals and the open stint, if any.

    The policy reads it through `gpu_s` (attained GPU-seconds), `run_s` (wall seconds
    run) and `last_run_s_at` (the current stint for a running job, the last closed one
    for a waiting job: the starvation guard's yardstick)."""

    closed_gpu_s: float = 0.0  # GPU-seconds of closed stints
    closed_run_s: float = 0.0  # wall seconds of closed stints
    last_run_s: float = 0.0  # length of the latest closed stint
    stint: Stint | None = None  # the open stint (running now)
    # attained GPU-seconds when a starvation promotion started the open stint (else None):
    # that stint's queue counts only service since then
    promoted_at_gpu_s: float | None = None

    def gpu_s(self, now: float) -> float:
        """GPU-seconds so far: closed stints plus the open one up to `now`."""
        s = self.stint
        return self.closed_gpu_s + (s.gpu_s(now) if s is not None else 0.0)

    def run_s(self, now: float) -> float:
        s = self.stint
        return self.closed_run_s + (s.run_s(now) if s is not None else 0.0)

    def last_run_s_at(self, now: float) -> float:
        s = self.stint
        return now - s.start if s is not None else self.last_run_s

    def started(self, start: float, gpus: int, promoted: bool = False) -> Attained:
        """A stint opened at `start` holding `gpus`; `promoted`: the starvation guard had
        lifted the job while it waited, so its queue counts from the service it has now."""
        return Attained(
            self.closed_gpu_s,
            self.closed_run_s,
            self.last_run_s,
            Stint.begin(start, gpus),
            self.closed_gpu_s if promoted else None,
        )

    def closed(self, end: float) -> Attained:
        """The open stint ended at `end`, added to the closed totals. The GPU-seconds
        already charged to it stay charged even if `end` lies before its last resize (a
        job is never credited back)."""
        s = self.stint
        if s is None:
            return self
        run = s.run_s(end)
        return Attained(self.closed_gpu_s + s.gpu_s(end), self.closed_run_s + run, run)

    def resized(self, gpus: int, last_seen: float, now: float) -> Attained:
        """The open stint now holding `gpus` (see `Stint.resized`)."""
        s = self.stint
        if s is None:
            return self
        new = s.resized(gpus, last_seen, now)
        if new is s:
            return self
        return Attained(
            self.closed_gpu_s, self.closed_run_s, self.last_run_s, new, self.promoted_at_gpu_s
        )
