"""Node agent: per-GPU and per-job utilisation and energy, Prometheus, co-location."""

from slurm_ext import __version__  # one version for the whole distribution

__all__ = ["__version__"]
