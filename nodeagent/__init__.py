"""Node agent: per-GPU and per-job utilisation and energy, Prometheus, co-location."""

__version__ = "0.1.0"
