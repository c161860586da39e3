"""What a backfill pass reads besides the cluster: Slurm's parameters that change what
it does (`BackfillParams`) and each pending job as it sees it (`Candidate`). Their own
module, so that the pass (`sim.backfill`), its free-GPU profile (`sim.bfprofile`) and
the will-run answer (`sim.willrun`) share them without importing each other back."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

INF = math.inf


@dataclass(frozen=True)
class BackfillParams:
    """Slurm's SchedulerParameters that change what a pass does (defaults: Slurm's)."""

    window_s: float = 86400.0  # bf_window (Slurm: minutes, default 1 day)
    max_job_test: int = 500  # bf_max_job_test
    resolution_s: float = 60.0  # bf_resolution
    # cons_tres's will-run window (30 wall s): a blocked job's start as `sim.willrun`
    # reports it; 0: the earliest exact start
    willrun_window_s: float = 0.0
    willrun_batch_start: bool = False  # report the batch's last end (Slurm up to 23.x)
    # a blocked job's reservation takes its nodes whole, as Slurm's backfill map (a node
    # bitmap) does; False: only its GPUs
    whole_nodes: bool = False

    def __post_init__(self) -> None:
        if not (
            self.window_s > 0
            and self.resolution_s > 0
            and self.max_job_test >= 1
            and self.willrun_window_s >= 0
        ):
            raise ValueError(f"backfill parameters out of range: {self}")


class Candidate(NamedTuple):
    """A pending job as the pass sees it (a named tuple: a pass makes up to
    `bf_max_job_test` of them, and a frozen dataclass was slow to build)."""

    job_id: int
    gpus: int
    consolidate: bool  # must get the fewest nodes possible
    limit_s: float  # its time limit (inf: none)
    cpus_per_gpu: int = 0


def round_up(t: float, step: float) -> float:
    """`t` rounded up to a multiple of `step` (as slurmctld rounds ends to bf_resolution)."""
    return math.ceil(t / step) * step if step > 0 and t < INF else t
