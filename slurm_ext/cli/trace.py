"""`slurm-ext trace synth`: write seeded synthetic traces (slurm_ext.sim.synth, sim.users)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurm_ext.sim.synth import synth_jobs, write_tiresias_csv
from slurm_ext.sim.users import UserModel, synth_user_jobs


@click.group()
def trace() -> None:
    """Work with workload traces."""


@trace.command()
@click.option("--jobs", "n", type=int, default=1000, show_default=True)
@click.option(
    "--gpus", type=int, default=64, show_default=True, help="Cluster GPUs the load refers to."
)
@click.option(
    "--load",
    type=float,
    default=1.05,
    show_default=True,
    help="Offered load (GPU demand / capacity).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--kind-model",
    type=click.Choice(["users", "flat"]),
    default="users",
    show_default=True,
    help="users: recurring users' kinds of jobs with their time limits and checkpoint "
    "flags (sim/users.py); flat: every job drawn independently (sim/synth.py).",
)
@click.option(
    "--users", "n_users", type=int, default=40, show_default=True, help="Users (kind model users)."
)
@click.option(
    "--oneoff",
    type=float,
    default=0.1,
    show_default=True,
    help="Share of jobs of a kind never seen again (kind model users).",
)
@click.option(
    "--checkpoint",
    type=float,
    default=0.5,
    show_default=True,
    help="Share of kinds that checkpoint (kind model users).",
)
@click.option("-o", "--output", type=click.Path(), default="-", show_default=True)
def synth(n, gpus, load, seed, kind_model, n_users, oneoff, checkpoint, output):
    """Write a seeded heavy-tailed Philly-like trace (Tiresias CSV format)."""
    if kind_model == "flat":
        jobs = synth_jobs(n, gpus, load, seed)
    else:
        try:
            model = UserModel(users=n_users, p_oneoff=oneoff, p_checkpoint=checkpoint)
            jobs = synth_user_jobs(n, gpus, load, seed, model)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    if output == "-":
        write_tiresias_csv(jobs, sys.stdout)
    else:
        write_tiresias_csv(jobs, Path(output))
        click.echo(f"wrote {len(jobs)} jobs to {output}", err=True)
