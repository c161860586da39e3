"""The Gittins table the ranking reads, built from the completed jobs' history.

One builder for the service (history from its store and sacct) and the simulator
(jobs completed earlier in the trace): the pooled table, per-GPU-class tables and the
per-kind tables of the conditioned index (policy/kinds.py), as PolicyConfig asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurm_ext.core.model import Completed
from slurm_ext.policy.config import PolicyConfig
from slurm_ext.policy.gittins import GittinsTable
from slurm_ext.policy.kinds import KindTables
from slurm_ext.policy.lazy_gittins import LazyGittinsTable

# completed jobs: GPU-seconds, (GPUs, GPU-seconds) where the GPU count is known, or
# Completed records that also carry the job's kind (user, name, account, time limit)
History = Sequence[float | tuple[int | None, float] | Completed] | GittinsTable | None


def as_completed(h: float | tuple[int | None, float] | Completed) -> Completed:
    """One history entry as a Completed record (kind unknown for bare numbers and pairs)."""
    if isinstance(h, Completed):
        return h
    if isinstance(h, tuple):
        return Completed(h[0], h[1])
    return Completed(None, h)


def build_table(history: History, config: PolicyConfig, lazy: bool = False) -> GittinsTable | None:
    """A Gittins table from completed jobs (the last `history_window`): GPU-seconds,
    (GPUs, GPU-seconds) or Completed records; with `gittins_classes = "gpus"` also one per
    GPU class, and with `gittins_kinds` / `gittins_time_limit` the per-kind tables
    (policy/kinds.py). `lazy`: the same tables, their cells computed when first read
    (`LazyGittinsTable`; the simulator, which refreshes often)."""
    if history is None or isinstance(history, GittinsTable):
        return history
    window = [as_completed(h) for h in history][-config.history_window :]
    start, per_decade = config.gittins_grid_start_gpu_s, config.gittins_grid_per_decade
    pairs = [(c.gpus, c.gpu_s) for c in window]
    tables = LazyGittinsTable if lazy else GittinsTable
    if config.gittins_classes == "gpus":
        base = tables.from_history(pairs, start, per_decade, config.gittins_class_min_samples)
    else:
        base = tables.from_samples([s for _, s in pairs], start, per_decade)
    whole = config.gittins_index == "whole"
    if not base.samples or not (config.gittins_kinds or config.gittins_time_limit or whole):
        return base
    kinds = KindTables.build(
        window,
        base,
        list(config.gittins_kinds),
        config.gittins_kind_min_samples,
        config.gittins_time_limit,
        whole,
        start,
        per_decade,
    )
    return replace(base, kinds=kinds)
