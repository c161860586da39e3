"""Completed-job history from Slurm's accounting, as rows of the store's completions.

Where slurmdbd exists, its history is far longer than what the service has seen itself;
the service seeds and refreshes its Gittins sample from it. The client reads it
(`SlurmClient.completed_jobs`: sacct through `slurm/sacct.py`, or pyslurm.db); this
module only turns those records into the rows the store keeps.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurm_ext.core.model import CompletedJob


def completion_rows(
    jobs: Iterable[CompletedJob],
) -> list[tuple[int, float, float, float, str, str, str, float | None, int | None]]:
    """(job_id, GPU-s, run s, end time, user, job name, account, time limit, GPUs) per job:
    the kind is what the conditioned Gittins index groups by (policy/kinds.py)."""
    return [
        (j.job_id, j.gpus * j.run_s, j.run_s, j.end_time, j.user, j.name, j.account,
         j.time_limit_s, j.gpus or None)
        for j in jobs
    ]  # fmt: skip
