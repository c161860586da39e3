"""Attained GPU service of a run stint, each part charged at the GPUs it held.

One definition for every shell that accounts service (the service's records now, the
simulator later). A stint is split into segments at every change of its GPU count: the
owner of a running job can shrink it (`scontrol update NumNodes=1`), and charging the
whole stint at the new count would cut the service already recorded. The moment of a
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


def close(
    closed_gpu_s: float, closed_run_s: float, stint: Stint, end: float
) -> tuple[float, float, float]:
    """Add a stint ending at `end` to the closed totals: (GPU-s, run s, the stint's length).

    The GPU-seconds already charged to the stint stay charged even if `end` lies before
    the last resize (a job is never credited back)."""
    run = stint.run_s(end)
    return closed_gpu_s + stint.gpu_s(end), closed_run_s + run, run
