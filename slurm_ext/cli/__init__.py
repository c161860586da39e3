"""`slurm-ext`: the admin's command line. Each part registers its click commands here."""

from __future__ import annotations

import logging
import sys

import click

from slurm_ext import __version__


@click.group()
@click.version_option(__version__, prog_name="slurm-ext")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """GPU-aware scheduling extensions for Slurm."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


# Commands are registered below, one line per part of the suite.
from slurm_ext.templates import template  # noqa: E402

main.add_command(template)

from slurm_ext.sim.cli import simulate, trace  # noqa: E402

main.add_command(simulate)
main.add_command(trace)

from slurm_ext.service_cli import explain, nodes, pin, queue, serve, unpin  # noqa: E402

for _cmd in (serve, queue, explain, nodes, pin, unpin):
    main.add_command(_cmd)

from slurm_ext.predict.cli import predict  # noqa: E402

main.add_command(predict)

from slurm_ext.energy_cli import energy  # noqa: E402

main.add_command(energy)

from slurm_ext.replay.cli import replay  # noqa: E402

main.add_command(replay)


if __name__ == "__main__":
    main()
