"""Types of sbatch template variables: what a value may be, and how it reaches the script.

A rendered template is a shell script that sbatch runs, and `--set` values come from
whoever calls `template render`: each one is checked against its variable's type and
then written so the shell reads it as data, never as code. Types that only admit
characters with no meaning to the shell (numbers, durations, names) are written as they
are; `path` admits `$VAR`, `${VAR}` and `${VAR:-default}` expansions (so a default like
`checkpoints/$SLURM_JOB_ID` works) but no command substitution, quote or backslash;
`word` is shell-quoted into one word; `words` is split like a shell would and each
word quoted. A variable declared without a type is `safe`: no shell character at all.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PLAIN = r"[A-Za-z0-9._/%+,:@=~-]"  # no space, glob, quote, backslash, $, `, ;, &, |, <, >
# `$NAME` takes every name character that follows (the lookahead): one way to read each
# value, so a check costs linear time. Without it `$aa$aa...{` could be split into names and
# plain text in exponentially many ways, each tried before the match fails (ReDoS).
_VAR = rf"\${_NAME}(?![A-Za-z0-9_])"
_EXPANSION = rf"{_VAR}|\$\{{{_NAME}(?::-(?:{_PLAIN}|{_VAR})*)?\}}"
_PATH_TOKEN = re.compile(rf"{_PLAIN}+|{_EXPANSION}")
PATH_MAX = 4096


@dataclass(frozen=True)
class VarType:
    name: str
    what: str  # for error messages: what a value of this type looks like
    check: Callable[[str], bool]
    write: Callable[[str], str] = str  # how a checked value is written into the script


def _int_in(low: int, high: int) -> Callable[[str], bool]:
    return lambda v: re.fullmatch(r"[0-9]{1,7}", v) is not None and low <= int(v) <= high


def _fraction(v: str) -> bool:
    number = re.fullmatch(r"[0-9]{1,3}(?:\.[0-9]{1,6})?|\.[0-9]{1,6}", v) is not None
    return number and 0 < float(v) <= 1


def _path(v: str) -> bool:
    """Plain characters and expansions, read token by token (each token has one reading)."""
    if not 0 < len(v) <= PATH_MAX:
        return False
    at = 0
    while at < len(v):
        m = _PATH_TOKEN.match(v, at)
        if m is None:
            return False
        at = m.end()
    return True


def _words(v: str) -> bool:
    try:
        shlex.split(v)
    except ValueError:
        return False
    return True


TYPES: dict[str, VarType] = {
    t.name: t
    for t in (
        VarType("int", "a whole number 1..1000000", _int_in(1, 1_000_000)),
        VarType("port", "a TCP port 1024..55535", _int_in(1024, 55535)),
        VarType(
            "duration",
            "a Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
            lambda v: (
                re.fullmatch(
                    r"[0-9]{1,6}(?::[0-9]{1,2}){0,2}|[0-9]{1,4}-[0-9]{1,2}"
                    r"(?::[0-9]{1,2}){0,2}",
                    v,
                )
                is not None
            ),
        ),  # fmt: skip
        VarType(
            "memory",
            "a size like 12G (number, then K, M, G or T)",
            lambda v: re.fullmatch(r"[0-9]{1,9}[KMGT]?", v) is not None,
        ),  # fmt: skip
        VarType("fraction", "a number in (0, 1]", _fraction),
        VarType(
            "name",
            "letters, digits and ._:/@+- (1..128)",
            lambda v: re.fullmatch(r"[A-Za-z0-9._:/@+-]{1,128}", v) is not None,
        ),  # fmt: skip
        VarType(
            "gres",
            "gpu:N, shard:N or mps:N, optionally gpu:TYPE:N",
            lambda v: (
                re.fullmatch(r"(?:gpu|shard|mps)(?::[A-Za-z0-9_.-]{1,64})?:[0-9]{1,4}", v)
                is not None
            ),
        ),  # fmt: skip
        VarType(
            "path",
            "a path; $VAR, ${VAR} and ${VAR:-default} expand, nothing else "
            "(no spaces, quotes, backslashes, globs or $(...))",
            _path,
        ),  # fmt: skip
        VarType(
            "word", "one word (written shell-quoted)", lambda v: 0 < len(v) <= 4096, shlex.quote
        ),  # fmt: skip
        VarType(
            "words",
            "shell words (each written shell-quoted)",
            lambda v: len(v) <= 4096 and _words(v),
            lambda v: " ".join(shlex.quote(w) for w in shlex.split(v)),
        ),  # fmt: skip
        VarType(
            "safe",
            "letters, digits and ._,:@%+=/- only",
            lambda v: re.fullmatch(r"[A-Za-z0-9._,:@%+=/-]*", v) is not None,
        ),  # fmt: skip
    )
}
DEFAULT_TYPE = "safe"


def write_value(type_name: str, value: str) -> str:
    """`value` as it goes into the script; ValueError saying what the type admits."""
    t = TYPES[type_name]
    if not t.check(value):
        raise ValueError(f"{value!r} is not {t.what}")
    return t.write(value)
