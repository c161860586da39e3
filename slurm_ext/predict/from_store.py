"""Predictor input from the service's store, and the service's periodic table rebuild.

Closes the loop of the data flow: node agents -> service store (SQLite) -> predictor
table -> job_submit.lua. One `CpuSample` per job that reported GPU time:

- per (node, job) only the report with the greatest `period_end` counts: reports are
  cumulative since `period_start`, so a re-delivered or older one adds nothing;
- nodes combine as total allocated cores / total GPUs, and the GPU utilisation as the
  mean weighted by each node's GPU-seconds (what `gpu_util_mean` means per node);
- the workload key is the job record's (`workload_key`: model tag, else user/jobname),
  the GPU type the config's `gpu_types` mapping of the NVML name (unmapped: untyped).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ext.core.config import load_config, positive
from slurm_ext.core.reports import JobReport, per_job
from slurm_ext.predict.cpu import PredictorFile, decide_cpus, with_elastic_keys
from slurm_ext.predict.samples import CpuSample, SampleError, sample_from_report, workload_key
from slurm_ext.predict.table import load_table, write_table
from slurm_ext.store.db import Store
from slurm_ext.store.rows import JobRecord

log = logging.getLogger("slurm_ext.predict")


@dataclass
class StoreSamples:
    """Samples from the store, and why the other jobs gave none (reason -> jobs)."""

    samples: list[CpuSample] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    unmapped_gpu_types: set[str] = field(default_factory=set)  # NVML names with no mapping


def samples_from_reports(
    reports: Iterable[JobReport],
    jobs: Mapping[int, JobRecord],
    gpu_types: Mapping[str, str],
) -> StoreSamples:
    """One sample per job with GPU time, allocated cores and a workload key (pure)."""
    out = StoreSamples()
    for job_id, per_node in sorted(per_job(reports, periods=False).items()):
        rec = jobs.get(job_id)
        if rec is None:
            out.skipped["no job record"] += 1
            continue
        key = workload_key(rec.model_tag, rec.user, rec.name)
        if key is None:
            out.skipped["no valid workload key"] += 1
            continue
        gpu_s = sum(r.gpu_seconds for r in per_node)
        gpus = sum(len(r.gpu_uuids) for r in per_node)
        if gpu_s <= 0 or gpus == 0:
            out.skipped["no GPU time reported"] += 1
            continue
        if any(r.cpu_cores_alloc is None for r in per_node):
            out.skipped["allocated cores unknown"] += 1
            continue
        cores = sum(r.cpu_cores_alloc or 0 for r in per_node)
        util = sum(r.gpu_util_mean * r.gpu_seconds for r in per_node) / gpu_s
        types = set()
        for r in per_node:
            name = r.gpu_type.strip()
            if name and name not in gpu_types:
                out.unmapped_gpu_types.add(name)
            types.add(gpu_types.get(name, ""))
        gpu_type = types.pop() if len(types) == 1 else ""  # mixed types: untyped
        try:
            sample = sample_from_report(key, gpu_type, cores, gpus, util)
        except SampleError as exc:
            log.warning("job %d: no predictor sample: %s", job_id, exc)
            out.skipped["invalid sample"] += 1
            continue
        if sample is None:
            out.skipped["allocated cores unknown"] += 1
            continue
        out.samples.append(sample)
    return out


def samples_from_store(store_path: str | Path, gpu_types: Mapping[str, str]) -> StoreSamples:
    """Read the store read-only (StoreError if missing or of another schema version)."""
    store = Store(store_path, readonly=True)
    try:
        return samples_from_reports(store.reports(), store.jobs(include_done=True), gpu_types)
    finally:
        store.close()


# ---- the service's periodic rebuild ---------------------------------------------------


@dataclass
class PredictorServiceConfig:
    """The `[predictor]` table of service.toml: rebuild the hook's table from the store."""

    table: str | None = None  # table to write; None: no rebuilds
    rebuild_every_s: float = positive(3600.0)
    config: str | None = None  # predictor.toml (None: built-in defaults, no gpu_types)

    def __post_init__(self) -> None:
        if self.rebuild_every_s <= 0:
            raise ValueError("rebuild_every_s must be > 0")


@dataclass(frozen=True)
class RebuildSummary:
    table: str
    jobs: int  # jobs that gave a sample
    rows: int
    fitted: int
    kept_elastic: int  # keys whose elastic GPU advice was carried over from the old table
    skipped: dict[str, int]
    unmapped_gpu_types: tuple[str, ...]

    def __str__(self) -> str:
        text = (
            f"wrote {self.rows} rows ({self.fitted} fitted) from {self.jobs} jobs to {self.table}"
        )
        if self.kept_elastic:
            text += f"; kept elastic GPUs of {self.kept_elastic} keys"
        if self.skipped:
            text += "; skipped " + ", ".join(f"{n} ({r})" for r, n in sorted(self.skipped.items()))
        if self.unmapped_gpu_types:
            text += "; GPU names without a gpu_types entry (untyped): " + ", ".join(
                repr(n) for n in self.unmapped_gpu_types
            )
        return text


def rebuild_table(
    store_path: str | Path,
    predictor_config: str | Path | None,
    table_path: str | Path,
    keep_elastic: bool = True,
) -> RebuildSummary:
    """Build the table from the store and replace it atomically.

    Raises (ConfigError, StoreError, TableError, OSError) before the table is touched
    when it cannot be built. The store holds no elastic workloads, so with keep_elastic
    the old table's elastic GPU column is carried over instead of being erased.
    """
    cfg = load_config(PredictorFile, predictor_config)
    got = samples_from_store(store_path, cfg.gpu_types)
    decisions = decide_cpus(got.samples, cfg.predictor)
    elastic: dict[str, int] = {}
    if keep_elastic:
        old = load_table(table_path)
        if old.valid:
            for row in old.rows.values():
                if row.gpus > 0:
                    elastic[row.key] = max(elastic.get(row.key, 0), row.gpus)
        decisions = with_elastic_keys(decisions, elastic, cfg.predictor)
    write_table(table_path, decisions, elastic)
    return RebuildSummary(
        table=str(table_path),
        jobs=len(got.samples),
        rows=len(decisions),
        fitted=sum(d.source == "fit" for d in decisions),
        kept_elastic=len(elastic),
        skipped=dict(got.skipped),
        unmapped_gpu_types=tuple(sorted(got.unmapped_gpu_types)),
    )


class PeriodicRebuild:
    """Calls `rebuild_table` at most every `rebuild_every_s` (the first call at once).

    The service calls `run_if_due` after each successful pass; any failure is logged and
    swallowed, because a predictor problem must never stop the priority service (the
    hook keeps reading the previous table, which the atomic writer left intact).
    """

    def __init__(self, config: PredictorServiceConfig, store_path: str | Path) -> None:
        self.config = config
        self.store_path = store_path
        self.next_at = 0.0  # time.monotonic() of the next rebuild
        self.last: RebuildSummary | None = None
        self.failures = 0

    def run_if_due(self, now: float | None = None) -> RebuildSummary | None:
        if self.config.table is None:
            return None
        now = time.monotonic() if now is None else now
        if now < self.next_at:
            return None
        self.next_at = now + self.config.rebuild_every_s  # a failure waits a period too
        try:
            self.last = rebuild_table(self.store_path, self.config.config, self.config.table)
        except Exception as exc:  # any predictor bug: log it, never stop the service
            self.failures += 1
            log.error(
                "predictor table %s not rebuilt (previous table kept): %s: %s",
                self.config.table,
                type(exc).__name__,
                exc,
            )
            return None
        log.info("predictor: %s", self.last)
        return self.last
