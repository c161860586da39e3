"""`slurm-ext example`: the files shipped from etc/ (hook, configs, units, ...), printed or
written out, so that an install from a wheel needs no checkout (slurm_ext.core.resources)."""

from __future__ import annotations

import click

from slurm_ext.cli.options import json_option
from slurm_ext.cli.output import echo_json
from slurm_ext.core.resources import shipped_file, shipped_names, write_file


@click.command()
@click.argument("name", required=False)
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="Write it here.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@json_option
def example(name: str | None, out: str | None, force: bool, as_json: bool) -> None:
    """Print (or write to OUT) a shipped file of etc/; without NAME, list them."""
    if name is None:
        if as_json:
            echo_json(shipped_names())
        else:
            click.echo("\n".join(shipped_names()))
        return
    try:
        text = shipped_file(name).read_text()
        if out is None:
            click.echo(text, nl=False)
        else:
            write_file(out, text, force=force)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from exc
    except OSError as exc:
        raise click.ClickException(str(exc)) from exc
