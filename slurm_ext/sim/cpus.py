"""GPU speed when CPU cores are short: the simulator's optional CPU dimension.

SAD (SoCC'18): a DL job's GPU throughput rises roughly linearly with the cores feeding
each GPU up to a per-model knee, then stays flat. The simulator runs a job at that
relative speed, so a job given too few cores holds its GPUs longer for the same work.
"""

from __future__ import annotations

from collections.abc import Mapping

# cores per GPU at which the GPU saturates (SAD, on V100)
DEFAULT_KNEES: dict[str, float] = {"resnet50": 7.0, "vgg16": 12.0, "overfeat": 40.0}


def cpu_speed(model: str | None, cores_per_gpu: float, knees: Mapping[str, float]) -> float:
    """Relative GPU speed, min(1, cores_per_gpu / knee); 1 for a model without a curve."""
    knee = knees.get(model) if model else None
    if not knee:
        return 1.0
    return min(1.0, cores_per_gpu / knee)


def even_share(cpus_per_node: int, gpus_per_node: int) -> int:
    """Cores per GPU when a node's cores are split evenly (what a job gets by default)."""
    return max(1, cpus_per_node // max(1, gpus_per_node))
