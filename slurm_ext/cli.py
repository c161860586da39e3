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


@main.command()
@click.argument("name", required=False)
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="Write it here.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="List the names as JSON.")
def example(name: str | None, out: str | None, force: bool, as_json: bool) -> None:
    """Print (or write to OUT) a shipped file of etc/; without NAME, list them."""
    import json

    from slurm_ext.resources import shipped_file, shipped_names, write_file

    if name is None:
        click.echo(json.dumps(shipped_names()) if as_json else "\n".join(shipped_names()))
        return
    try:
        text = shipped_file(name).read_text()
        if out is None:
            click.echo(text, nl=False)
        else:
            write_file(out, text, force=force)
    except (KeyError, OSError) as exc:
        raise click.ClickException(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from exc


if __name__ == "__main__":
    main()
