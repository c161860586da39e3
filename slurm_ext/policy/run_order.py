"""What the whole-job index orders by where nothing is preempted: the expected
remaining GPU-time (Smith's rule, the default) or the expected remaining run time
(`gittins_whole_order = "run_time"`: the GPU-time over the job's GPUs).

Why a choice: under a GPU-time order a wide job ranks behind every narrow job of less
GPU-time, so in a long backlog a user's recurring 8- or 16-GPU kind waits for the wait
guard (10 x its predicted run, days for a kind of hours) where Slurm's FIFO would have
started it sooner (docs/benchmarks.md, "Session 6: the non-preemptive target"). By run
time, a 16-GPU job of one hour ranks with the 1-GPU jobs of one hour. It applies only
to the whole-job index: with preemption a never-run wide job would outrank every
running job by its width alone.
"""

from __future__ import annotations

from slurm_ext.policy.config import PolicyConfig


def by_run_time(config: PolicyConfig) -> bool:
    """Whether keys order by expected run time (gittins, whole-job index, "run_time")."""
    return (
        config.policy == "gittins"
        and config.gittins_index == "whole"
        and config.gittins_whole_order == "run_time"
    )


def ordered_index(index: float, gpus: int, config: PolicyConfig) -> float:
    """The value a key sorts by (higher first): the Gittins `index` (per GPU-second), or
    index x GPUs (1 / expected remaining run time) under `by_run_time`."""
    if gpus > 1 and by_run_time(config):
        return index * gpus
    return index


def describe_run_time(index: float, gpus: int) -> str:
    """`explain`'s line under `by_run_time`: the predicted run the key sorts by."""
    if index <= 0 or gpus <= 0:
        return "ordered by predicted run time: unknown (index 0)"
    return f"ordered by predicted run time: {1.0 / (index * gpus):.0f} s (GPU-time / {gpus} GPUs)"
