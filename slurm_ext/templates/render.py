"""sbatch templates: load, render (`{{name}}` placeholders) and check job scripts.

A template is a plain sbatch script. Right after the `#!` line comes its header, lines
starting with `## `:

    ## slurm-ext template: NAME
    ## One-line description.
    ## var NAME: TYPE = DEFAULT | one-line description

Every `{{name}}` in the script must be declared by a `## var` line (or be the built-in
`templates_dir`, the directory the templates live in). TYPE (slurm_ext.templates.types:
int, duration, memory, name, path, word, words, ...; `safe` if left out) says what a value
may be and how it is written so that the shell reads it as data. Rendering checks and
fills every placeholder, drops the header and checks the result; `check_script` validates any job script: the
`#SBATCH` essentials, the suite's hints in `--comment` (slurm_ext.core.hints), unfilled
placeholders, with line numbers.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from slurm_ext.core.hints import parse_hints
from slurm_ext.templates.types import DEFAULT_TYPE, TYPES, write_value

PLACEHOLDER_RE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VAR_RE = re.compile(r"^## var\s+([^\s:=]+)\s*(?::\s*(\w+)\s*)?=\s*(.*?)\s*\|\s*(.*?)\s*$")
TITLE_PREFIX = "## slurm-ext template:"
BUILTINS = ("templates_dir",)
TEMPLATE_SUFFIX = ".sbatch"
HINT_KEYS = ("model", "elastic", "opportunistic", "checkpoint", "opt_out", "slurm_ext")
# Options that ask for a GPU (or a slice of one).
GPU_OPTIONS = ("--gpus", "-G", "--gpus-per-node", "--gpus-per-task", "--gpus-per-socket")
GPU_GRES_RE = re.compile(r"(?:^|,)(?:gres:)?(gpu|shard|mps)(?::|,|$)")
# Environment the templates export for the job itself, and the hint each must match.
HINT_ENV = {"SLURM_EXT_MODEL": "model", "SLURM_EXT_ELASTIC": "elastic"}


class TemplateError(ValueError):
    """A template or a render request is wrong; the message names the file, line or key."""


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    description: str
    line: int
    type: str = DEFAULT_TYPE


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str
    variables: dict[str, Variable]
    lines: list[str] = field(repr=False)  # the whole file, header included


@dataclass(frozen=True)
class Problem:
    """One finding of `check_script`; `line` is 1-based (0: the file as a whole)."""

    line: int
    message: str
    severity: str = "error"  # or "warning"

    def format(self, filename: str) -> str:
        where = f"{filename}:{self.line}" if self.line else filename
        return f"{where}: {self.severity}: {self.message}"


# ---- locating and loading -------------------------------------------------------------
def templates_dir() -> Path:
    """The sbatch_templates directory: $SLURM_EXT_TEMPLATES, else the package's own (package
    data in an install; in a checkout slurm_ext/sbatch_templates links to sbatch_templates/)."""
    candidates = []
    if os.environ.get("SLURM_EXT_TEMPLATES"):
        candidates.append(Path(os.environ["SLURM_EXT_TEMPLATES"]))
    candidates.append(Path(str(files("slurm_ext") / "sbatch_templates")))
    for path in candidates:
        if path.is_dir() and any(path.glob(f"*{TEMPLATE_SUFFIX}")):
            return path
    raise TemplateError(
        "no sbatch templates found; looked in " + ", ".join(str(p) for p in candidates)
    )


def template_names() -> list[str]:
    return sorted(
        p.name.removesuffix(TEMPLATE_SUFFIX) for p in templates_dir().glob(f"*{TEMPLATE_SUFFIX}")
    )


def find_template(name_or_path: str) -> Path:
    """A shipped template by name (`single-gpu`), or a template file by path."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if NAME_RE.fullmatch(name_or_path.replace("-", "_")):
        shipped = templates_dir() / f"{name_or_path}{TEMPLATE_SUFFIX}"
        if shipped.is_file():
            return shipped
    raise TemplateError(
        f"no template {name_or_path!r}: not a file and not one of {', '.join(template_names())}"
    )


def load_template(name_or_path: str) -> Template:
    """Parse a template's header and verify every placeholder is declared and every variable used."""
    path = find_template(name_or_path)
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("#!"):
        raise TemplateError(f"{path}:1: a template starts with a #! line (sbatch needs one)")
    name = path.name.removesuffix(TEMPLATE_SUFFIX)
    description = ""
    variables: dict[str, Variable] = {}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.startswith("##"):
            break
        if line.startswith(TITLE_PREFIX):
            declared = line[len(TITLE_PREFIX) :].strip()
            if declared != name:
                raise TemplateError(f"{path}:{lineno}: header names {declared!r}, file is {name!r}")
        elif line.startswith("## var"):
            m = VAR_RE.match(line)
            if m is None:
                raise TemplateError(
                    f"{path}:{lineno}: expected '## var NAME = DEFAULT | description' "
                    f"(or NAME: TYPE = ...), got {line!r}"
                )
            var, vtype, default, desc = m.groups()
            vtype = vtype or DEFAULT_TYPE
            if vtype not in TYPES:
                raise TemplateError(
                    f"{path}:{lineno}: unknown type {vtype!r} (known: {', '.join(TYPES)})"
                )
            if not NAME_RE.fullmatch(var) or var in BUILTINS:
                raise TemplateError(f"{path}:{lineno}: bad variable name {var!r}")
            if var in variables:
                raise TemplateError(f"{path}:{lineno}: variable {var!r} declared twice")
            if not desc:
                raise TemplateError(f"{path}:{lineno}: variable {var!r} has no description")
            variables[var] = Variable(var, default, desc, lineno, vtype)
        elif not description:
            description = line.lstrip("#").strip()
    used: set[str] = set()
    for lineno, line in enumerate(lines, start=1):
        for m in PLACEHOLDER_RE.finditer(line):
            ref = m.group(1)
            if ref not in variables and ref not in BUILTINS:
                raise TemplateError(f"{path}:{lineno}: placeholder {{{{{ref}}}}} is not declared")
            used.add(ref)
    unused = [v.name for v in variables.values() if v.name not in used]
    if unused:
        raise TemplateError(f"{path}: declared but never used: {', '.join(unused)}")
    builtins = _builtins(path)
    for var in variables.values():
        try:
            write_value(var.type, _fill(var.default, builtins))
        except ValueError as exc:
            raise TemplateError(f"{path}:{var.line}: default of {var.name}: {exc}") from None
    return Template(name, path, description, variables, lines)


def _builtins(path: Path) -> dict[str, str]:
    return {"templates_dir": str(path.resolve().parent)}


def _fill(text: str, table: dict[str, str]) -> str:
    return PLACEHOLDER_RE.sub(lambda m: table[m.group(1)], text)


# ---- rendering ------------------------------------------------------------------------
def render(template: Template, values: dict[str, str] | None = None) -> str:
    """Fill the template with its defaults overridden by `values`; the result passes check_script."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(template.variables))
    if unknown:
        raise TemplateError(
            f"{template.name}: unknown variable(s) {', '.join(unknown)}; "
            f"known: {', '.join(template.variables)}"
        )
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            raise TemplateError(f"{template.name}: value for {key!r} contains a line break")
        if PLACEHOLDER_RE.search(value):
            raise TemplateError(
                f"{template.name}: value for {key!r} contains a {{{{...}}}} placeholder"
            )
    builtins = _builtins(template.path)
    table = {k: shlex.quote(v) for k, v in builtins.items()}  # if a template uses it bare
    for var in template.variables.values():
        value = values[var.name] if var.name in values else _fill(var.default, builtins)
        try:
            table[var.name] = write_value(var.type, value)
        except ValueError as exc:
            raise TemplateError(f"{template.name}: {var.name}: {exc}") from None
    body = [template.lines[0], f"# rendered from slurm-ext template {template.name}"]
    body += [_fill(line, table) for line in template.lines[1:] if not line.startswith("##")]
    text = "\n".join(body) + "\n"
    errors = [p for p in check_script(text) if p.severity == "error"]
    if errors:
        raise TemplateError(
            f"{template.name}: the rendered script is not valid:\n"
            + "\n".join(p.format("<rendered>") for p in errors)
        )
    return text


# ---- checking -------------------------------------------------------------------------
@dataclass
class _Directives:
    """The #SBATCH options of a script: option name -> (value, line)."""

    options: dict[str, tuple[str, int]] = field(default_factory=dict)

    def get(self, *names: str) -> tuple[str, int] | None:
        for name in names:
            if name in self.options:
                return self.options[name]
        return None


def _parse_directives(lines: list[str], problems: list[Problem]) -> _Directives:
    found = _Directives()
    in_header = True
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if lineno == 1 and line.startswith("#!"):
            continue
        is_directive = re.match(r"#SBATCH\s", line + " ") is not None
        if is_directive and not in_header:
            problems.append(Problem(lineno, "#SBATCH after the first command is ignored by sbatch"))
            continue
        if not is_directive:
            if line and not line.startswith("#"):
                in_header = False
            continue
        try:
            words = shlex.split(line[len("#SBATCH") :], comments=False)
        except ValueError as exc:
            problems.append(Problem(lineno, f"cannot parse #SBATCH line: {exc}"))
            continue
        for i, word in enumerate(words):
            if not word.startswith("-"):
                continue
            opt, sep, value = word.partition("=")
            if not sep and opt in ("-G", "-t", "-N", "-n", "-c", "-J", "-o") and i + 1 < len(words):
                value = words[i + 1]
            found.options[opt] = (value, lineno)
    return found


def check_script(text: str) -> list[Problem]:
    """Problems in a job script: #SBATCH essentials, hints, unfilled placeholders."""
    lines = text.splitlines()
    problems: list[Problem] = []
    if not lines or not lines[0].startswith("#!"):
        problems.append(
            Problem(1, "the first line must be #! and an interpreter (sbatch refuses the script)")
        )
    for lineno, line in enumerate(lines, start=1):
        for m in PLACEHOLDER_RE.finditer(line):
            problems.append(Problem(lineno, f"unfilled placeholder {m.group(0)}"))
    d = _parse_directives(lines, problems)
    if d.get("--time", "-t") is None:
        problems.append(
            Problem(0, "no #SBATCH --time: the scheduler cannot backfill or rank the job")
        )
    gres = d.get("--gres")
    asks_gpu = d.get(*GPU_OPTIONS) is not None or (
        gres is not None and GPU_GRES_RE.search(gres[0]) is not None
    )
    if not asks_gpu:
        problems.append(
            Problem(0, "no GPU request (#SBATCH --gres=gpu:N, shard:N, mps:N or --gpus...)")
        )
    problems += _check_hints(lines, d)
    if d.get("--requeue") is not None:
        if d.get("--open-mode") is None or d.options["--open-mode"][0] != "append":
            line = d.options["--requeue"][1]
            problems.append(
                Problem(
                    line,
                    "--requeue without --open-mode=append: a restart truncates the output",
                    "warning",
                )
            )
    signal = d.get("--signal")
    if signal is not None and not re.fullmatch(r"(?:[BR]:)?(?:SIG)?[A-Z0-9]+(?:@\d+)?", signal[0]):
        problems.append(Problem(signal[1], f"--signal={signal[0]!r} is not [B:]SIG[@seconds]"))
    return sorted(problems, key=lambda p: p.line)


def _check_hints(lines: list[str], d: _Directives) -> list[Problem]:
    comment = d.get("--comment")
    if comment is None:
        return [
            Problem(
                0,
                "no #SBATCH --comment with the suite's hints (at least model=TAG, or slurm_ext=off)",
            )
        ]
    value, lineno = comment
    problems = []
    hints = parse_hints(value)
    for error in hints.errors:
        problems.append(Problem(lineno, f"hint {error}"))
    for token in value.split():
        key, sep, _ = token.partition("=")
        if not sep:
            problems.append(Problem(lineno, f"hint token {token!r} is not key=value", "warning"))
        elif key not in HINT_KEYS:
            problems.append(
                Problem(lineno, f"unknown hint {key!r} (known: {', '.join(HINT_KEYS)})", "warning")
            )
    if (
        hints.model is None
        and not hints.all_off
        and not any(e.startswith("model:") for e in hints.errors)
    ):
        problems.append(
            Problem(lineno, "hints have no model=TAG (add one, or slurm_ext=off to opt out)")
        )
    if hints.checkpoint and d.get("--requeue") is None:
        problems.append(
            Problem(
                lineno,
                "hint checkpoint=1 without #SBATCH --requeue: Slurm will not requeue the job",
                "warning",
            )
        )
    expected = {
        "model": hints.model,
        "elastic": f"{hints.elastic[0]}-{hints.elastic[1]}" if hints.elastic else None,
    }
    for env_lineno, line in enumerate(lines, start=1):
        m = re.match(r"\s*export\s+(SLURM_EXT_[A-Z]+)=(\S*)", line)
        if m and m.group(1) in HINT_ENV:
            want = expected[HINT_ENV[m.group(1)]]
            got = m.group(2).strip("'\"")
            if want is not None and got != want:
                problems.append(
                    Problem(
                        env_lineno,
                        f"{m.group(1)}={got} differs from the hint {HINT_ENV[m.group(1)]}={want}",
                    )
                )
    return problems
