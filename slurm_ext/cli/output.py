"""Table and JSON output for every command, so they all print alike.

A command builds plain rows (dicts of JSON-ready values) once; `--json` prints them as
they are, the text form through `table` with per-column formatting. Durations print as
`1h02m` (`duration`), never as raw seconds or floats.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from slurm_ext.core.durations import duration  # noqa: F401 (the commands import it from here)


@dataclass(frozen=True)
class Column:
    """One table column: its heading, the row key, how to format a value, alignment."""

    heading: str
    key: str
    fmt: Callable[[Any], str] = str
    right: bool = False
    width: int | None = None  # cut values to this many characters

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        text = "-" if value is None or value == "" else self.fmt(value)
        return text[: self.width] if self.width else text


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Rows as aligned text under their headings; missing or empty values print as '-'."""
    body = [[c.cell(r) for c in columns] for r in rows]
    widths = [max([len(c.heading)] + [len(b[i]) for b in body]) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if c.right else cell.ljust(w)
            for c, cell, w in zip(columns, cells, widths, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line([c.heading for c in columns]), *(line(b) for b in body)])


def echo_json(data: Any) -> None:
    """One JSON document on stdout (what every command's --json prints)."""
    click.echo(json.dumps(data, indent=1))


def echo_fields(row: Mapping[str, Any]) -> None:
    """A result as `key: value` lines, floats to three decimals."""
    for k, v in row.items():
        click.echo(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
