"""Table and JSON output for every command, so they all print alike.

A command builds plain rows (dicts of JSON-ready values) once; `--json` prints them as
they are, the text form through `table` with per-column formatting. Durations print as
`1h02m` (`duration`), never as raw seconds or floats.

Text from Slurm, the store or a server (job names, user names, reasons) reaches a
terminal only through `safe`: Slurm accepts ESC in a job name, and a terminal obeys what
follows it (set the title, move the cursor, rewrite a line). `--json` needs nothing:
json.dumps escapes every control and non-ASCII character.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from slurm_ext.core.durations import duration  # noqa: F401 (the commands import it from here)


def safe(text: object) -> str:
    """`text` as it may go to a terminal: every character a terminal could act on rather
    than show, or that could reorder or hide what follows (C0 and C1 controls with ESC,
    DEL, bidi overrides and other format characters, separators other than the space,
    unassigned and private-use code points: all that str.isprintable refuses) is written
    as its escape (\\x1b, \\u202e); all the rest is kept."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def echo_safe(text: object, err: bool = False) -> None:
    """One line to the terminal through `safe` (a line break inside it is escaped too)."""
    click.echo(safe(text), err=err)


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
        text = "-" if value is None or value == "" else safe(self.fmt(value))
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
        echo_safe(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
