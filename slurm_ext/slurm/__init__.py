"""Talking to Slurm: one SlurmClient interface, two backends, and `make_client` to pick one."""

from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.slurm.client import JobNotFound, SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.slurm.factory import make_client

__all__ = [
    "CliSlurmClient",
    "JobNotFound",
    "SlurmClient",
    "SlurmError",
    "SlurmUnavailable",
    "make_client",
]
