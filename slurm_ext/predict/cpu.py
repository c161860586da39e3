"""CPU cores per GPU per (workload, GPU type): the SAD-style decision with its evidence."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_ext.predict.curve import SaturationFit, fit_saturation
from slurm_ext.predict.samples import CpuSample, valid_gpu_type

ANY_GPU = "*"  # table rows for jobs that name no GPU type


@dataclass(frozen=True)
class CpuPredictorConfig:
    """The [predictor] table of etc/predictor.toml."""

    site_default_cpus_per_gpu: int = 4
    saturation_fraction: float = 0.95  # fewest cores reaching this share of the plateau
    min_samples: int = 3  # per (key, gpu type); fewer -> site default
    min_cpus_per_gpu: int = 1
    max_cpus_per_gpu: int = 64  # never predict more (also the search range of the fit)
    table_path: str = "/var/lib/slurm-ext/predictor.tsv"

    def __post_init__(self) -> None:
        if not 0.5 <= self.saturation_fraction < 1.0:
            raise ValueError(
                f"saturation_fraction must be in [0.5, 1), got {self.saturation_fraction}"
            )
        if self.min_samples < 2:
            raise ValueError(f"min_samples must be >= 2, got {self.min_samples}")
        if not 1 <= self.min_cpus_per_gpu <= self.max_cpus_per_gpu <= 1024:
            raise ValueError("need 1 <= min_cpus_per_gpu <= max_cpus_per_gpu <= 1024")
        if not self.min_cpus_per_gpu <= self.site_default_cpus_per_gpu <= self.max_cpus_per_gpu:
            raise ValueError(
                "site_default_cpus_per_gpu must lie in min_cpus_per_gpu..max_cpus_per_gpu"
            )


@dataclass(frozen=True)
class PredictorFile:
    """etc/predictor.toml. `gpu_types` maps the GPU name a node agent reports (NVML's,
    e.g. "NVIDIA H100 80GB HBM3") to the site's Slurm gres type name ("h100"); the names
    are the site's choice in gres.conf, so there is no guessing: an unmapped name gives an
    untyped sample (the key's `*` row)."""

    predictor: CpuPredictorConfig = CpuPredictorConfig()
    gpu_types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, gres in self.gpu_types.items():
            if not gres or not valid_gpu_type(gres):
                raise ValueError(
                    f"gpu_types.{name!r}: {gres!r} is not a gres type name "
                    "(letters, digits, ._:@+-, 1..64 chars)"
                )


@dataclass(frozen=True)
class CpuDecision:
    key: str
    gpu_type: str  # a gres type, or ANY_GPU
    cpus_per_gpu: int
    source: str  # "fit", "default" or "max-over-types"
    reason: str
    samples: tuple[tuple[float, float], ...] = ()  # (cores_per_gpu, gpu_util)
    fit: SaturationFit | None = None


def decide_one(
    key: str, gpu_type: str, points: list[tuple[float, float]], cfg: CpuPredictorConfig
) -> CpuDecision:
    """The decision for one (key, gpu type) from its samples."""
    pts = tuple(sorted(points))
    if len(pts) < cfg.min_samples:
        return CpuDecision(
            key,
            gpu_type,
            cfg.site_default_cpus_per_gpu,
            "default",
            f"{len(pts)} samples < min_samples {cfg.min_samples}",
            pts,
        )
    try:
        fit = fit_saturation(pts, cfg.max_cpus_per_gpu)
    except ValueError as exc:
        return CpuDecision(key, gpu_type, cfg.site_default_cpus_per_gpu, "default", str(exc), pts)
    if fit.plateau <= 0.01:
        return CpuDecision(
            key,
            gpu_type,
            cfg.site_default_cpus_per_gpu,
            "default",
            "GPU idle at every core count: CPU is not what limits it",
            pts,
            fit,
        )
    need = math.ceil(fit.cores_for(cfg.saturation_fraction) - 1e-9)
    top = max(c for c, _ in pts)
    if need > top or (fit.model == "knee" and fit.shape >= top - 1e-9):
        # utilisation still rising at the largest core count sampled: the plateau is beyond
        # the evidence, so give the most the site allows rather than starve the GPU
        cores = cfg.max_cpus_per_gpu
        reason = (
            f"no plateau within the sampled {min(c for c, _ in pts):g}..{top:g} cores/GPU "
            f"({fit.model} fit): giving max_cpus_per_gpu {cores}"
        )
        return CpuDecision(key, gpu_type, cores, "fit", reason, pts, fit)
    cores = min(cfg.max_cpus_per_gpu, max(cfg.min_cpus_per_gpu, need))
    pct = f"{cfg.saturation_fraction:.0%}"
    reason = f"{fit.model} fit: {pct} of plateau {fit.plateau:.2f} at {need} cores/GPU"
    if cores != need:
        reason += f"; clamped to {cores}"
    return CpuDecision(key, gpu_type, cores, "fit", reason, pts, fit)


def decide_cpus(samples: Iterable[CpuSample], cfg: CpuPredictorConfig) -> list[CpuDecision]:
    """One decision per (key, gpu type) seen, plus a per-key ANY_GPU row (the max over types,
    so a job that names no type is never starved), sorted by key then type."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        groups[(s.key, s.gpu_type or ANY_GPU)].append((float(s.cores_per_gpu), float(s.gpu_util)))
    decisions = [decide_one(k, t, pts, cfg) for (k, t), pts in groups.items()]
    by_key: dict[str, list[CpuDecision]] = defaultdict(list)
    for d in decisions:
        by_key[d.key].append(d)
    for key, ds in by_key.items():
        if not any(d.gpu_type == ANY_GPU for d in ds):
            top = max(ds, key=lambda d: d.cpus_per_gpu)
            decisions.append(
                CpuDecision(
                    key,
                    ANY_GPU,
                    top.cpus_per_gpu,
                    "max-over-types",
                    f"largest over GPU types (from {top.gpu_type})",
                )
            )
    return sorted(decisions, key=lambda d: (d.key, d.gpu_type != ANY_GPU, d.gpu_type))


def default_decision(key: str, gpu_type: str, cfg: CpuPredictorConfig) -> CpuDecision:
    return CpuDecision(
        key, gpu_type or ANY_GPU, cfg.site_default_cpus_per_gpu, "default", "unknown workload"
    )


def with_elastic_keys(
    decisions: list[CpuDecision], elastic_gpus: dict[str, int], cfg: CpuPredictorConfig
) -> list[CpuDecision]:
    """`decisions` plus a site-default `*` row for each elastic key without CPU samples,
    so its GPU advice has a row to live in."""
    known = {d.key for d in decisions}
    extra = [default_decision(k, ANY_GPU, cfg) for k in sorted(set(elastic_gpus) - known)]
    return decisions + extra
