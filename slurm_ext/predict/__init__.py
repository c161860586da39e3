"""Predictor: CPU cores per GPU (SAD) and elastic GPU counts (DP), and the hook's table.

Pure functions (curve, cpu, elastic, rewrite) with thin file/CLI shells (table, cli).
"""

from slurm_ext.predict.cpu import ANY_GPU, CpuDecision, CpuPredictorConfig, decide_cpus
from slurm_ext.predict.elastic import ElasticJob, allocate_elastic, amdahl_throughput
from slurm_ext.predict.samples import CpuSample

__all__ = [
    "ANY_GPU",
    "CpuDecision",
    "CpuPredictorConfig",
    "CpuSample",
    "ElasticJob",
    "allocate_elastic",
    "amdahl_throughput",
    "decide_cpus",
]
