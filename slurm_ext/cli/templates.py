"""`slurm-ext template list | render | check`: the sbatch templates (slurm_ext.templates.render)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click

from slurm_ext.cli.options import json_option
from slurm_ext.cli.output import echo_json
from slurm_ext.templates.render import (
    TemplateError,
    check_script,
    load_template,
    render,
    template_names,
)


def _parse_sets(pairs: tuple[str, ...]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--set")
        values[key] = value
    return values


@click.group("template")
def template() -> None:
    """sbatch templates for DL jobs that carry the suite's hints."""


@template.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the shipped templates and their variables."""
    try:
        shipped = {name: load_template(name) for name in template_names()}
    except TemplateError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(
            {
                "templates": [
                    {
                        "name": name,
                        "path": str(t.path),
                        "description": t.description,
                        "variables": [
                            {
                                "name": v.name,
                                "type": v.type,
                                "default": v.default,
                                "description": v.description,
                            }
                            for v in t.variables.values()
                        ],
                    }
                    for name, t in shipped.items()
                ]
            }
        )
        return
    for name, t in shipped.items():
        click.echo(f"{name}: {t.description}")
        for var in t.variables.values():
            click.echo(f"    {var.name:<16} {var.type:<8} {var.default:<32} {var.description}")


@template.command("render")
@click.argument("name")
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a variable (repeatable)."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write here, not stdout.",
)
def render_cmd(name: str, sets: tuple[str, ...], output: Path | None) -> None:
    """Fill template NAME (a shipped name or a file) and print the job script."""
    try:
        text = render(load_template(name), _parse_sets(sets))
    except TemplateError as exc:
        raise click.ClickException(str(exc)) from exc
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        output.chmod(0o755)


@template.command("check")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@json_option
def check_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Validate job scripts; exit 1 if any has an error."""
    failed = False
    found = [(path, check_script(path.read_text())) for path in files]
    if as_json:
        echo_json(
            {
                "files": [
                    {
                        "path": str(path),
                        "ok": not any(p.severity == "error" for p in problems),
                        "problems": [asdict(p) for p in problems],
                    }
                    for path, problems in found
                ]
            }
        )
    for path, problems in found:
        if any(p.severity == "error" for p in problems):
            failed = True
        if as_json:
            continue
        for p in problems:
            click.echo(p.format(str(path)), err=p.severity == "error")
        if not problems:
            click.echo(f"{path}: ok")
    if failed:
        sys.exit(1)
