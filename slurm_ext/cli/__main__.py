"""`python -m slurm_ext.cli`: what the `slurm-ext` console script runs."""

from slurm_ext.cli import main

main(prog_name="slurm-ext")
