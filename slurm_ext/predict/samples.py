"""Predictor input: one observation of GPU utilisation at a given CPU-cores-per-GPU.

Plain records so the predictor does not depend on the store: the service turns node-agent
`JobReport`s into `CpuSample`s (see `sample_from_report`), tests and `predict build` read
them from JSON lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from slurm_ext.core.hints import KEY_RE

GPU_TYPE_MAX = 64


class SampleError(ValueError):
    """A sample record is invalid; the message names the file, line and field."""


@dataclass(frozen=True)
class CpuSample:
    key: str  # workload key: the model tag, else "user/jobname"
    gpu_type: str  # Slurm gres type name ("v100"); "" when the job named no type
    cores_per_gpu: float
    gpu_util: float  # mean GPU utilisation 0..1 over the job's GPU time

    def __post_init__(self) -> None:
        problem = sample_problem(self)
        if problem:
            raise SampleError(problem)


def valid_gpu_type(gpu_type: str) -> bool:
    return gpu_type == "" or (
        len(gpu_type) <= GPU_TYPE_MAX
        and KEY_RE.fullmatch(gpu_type) is not None
        and "/" not in gpu_type
    )


def sample_problem(s: CpuSample) -> str | None:
    if not isinstance(s.key, str) or not KEY_RE.fullmatch(s.key):
        return f"key: {s.key!r} is not a valid workload key (letters, digits, ._:/@+-, 1..128)"
    if not isinstance(s.gpu_type, str) or not valid_gpu_type(s.gpu_type):
        return f"gpu_type: {s.gpu_type!r} is not a valid gres type name"
    for name, value, lo, hi in (
        ("cores_per_gpu", s.cores_per_gpu, 0.0, 1024.0),
        ("gpu_util", s.gpu_util, 0.0, 1.0),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            return f"{name}: expected a finite number, got {value!r}"
        if not lo <= value <= hi:
            return f"{name}: {value!r} outside {lo:g}..{hi:g}"
    if s.cores_per_gpu <= 0:
        return f"cores_per_gpu: must be > 0, got {s.cores_per_gpu!r}"
    return None


def workload_key(model: str | None, user: str, job_name: str) -> str | None:
    """The predictor's key for a job: its model tag, else "user/jobname" (None if not a valid key)."""
    key = model if model else f"{user}/{job_name}"
    return key if KEY_RE.fullmatch(key) else None


def sample_from_report(
    key: str, gpu_type: str, cpu_cores_alloc: int | None, gpus: int, gpu_util_mean: float
) -> CpuSample | None:
    """A sample from a node-agent report's fields; None when the report cannot say cores per GPU."""
    if not cpu_cores_alloc or gpus <= 0:
        return None
    return CpuSample(key, gpu_type, cpu_cores_alloc / gpus, min(1.0, max(0.0, gpu_util_mean)))


def load_samples(path: str | Path) -> list[CpuSample]:
    """Read samples from JSON lines: {"key", "gpu_type", "cores_per_gpu", "gpu_util"} per line."""
    samples = []
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise SampleError(f"{p}: cannot read: {exc}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SampleError(f"{p}:{n}: not JSON: {exc}") from exc
        if not isinstance(rec, dict):
            raise SampleError(f"{p}:{n}: expected an object")
        fields = ("key", "gpu_type", "cores_per_gpu", "gpu_util")
        missing = [f for f in fields if f not in rec]
        if missing:
            raise SampleError(f"{p}:{n}: missing {', '.join(missing)}")
        try:
            samples.append(CpuSample(*(rec[f] for f in fields)))
        except SampleError as exc:
            raise SampleError(f"{p}:{n}: {exc}") from exc
    return samples
