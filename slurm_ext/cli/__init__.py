"""`slurm-ext`: the admin's command line, one module per command group.

The root group lists its commands explicitly: importing a command module registers
nothing by itself. Shared options live in `cli.options`, table and JSON output in
`cli.output`; the work itself is done by the modules the commands call.
"""

from __future__ import annotations

import logging
import sys

import click

from slurm_ext import __version__
from slurm_ext.cli.energy import energy
from slurm_ext.cli.example import example
from slurm_ext.cli.inspect import explain, nodes, queue
from slurm_ext.cli.predict import predict
from slurm_ext.cli.replay import replay
from slurm_ext.cli.service import pin, serve, unpin
from slurm_ext.cli.sim import simulate
from slurm_ext.cli.templates import template
from slurm_ext.cli.trace import trace

COMMANDS = (
    template,
    simulate,
    trace,
    serve,
    queue,
    explain,
    nodes,
    pin,
    unpin,
    predict,
    energy,
    replay,
    example,
)


@click.group(commands=COMMANDS)
@click.version_option(__version__, "-V", "--version", prog_name="slurm-ext")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """GPU-aware scheduling extensions for Slurm."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
