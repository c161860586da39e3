"""GPU-aware scheduling extensions for Slurm: policy core, service, simulator, predictor."""

__version__ = "0.1.0"
