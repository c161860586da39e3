"""Layering, read off every import (those inside functions and under TYPE_CHECKING too).

- `nodeagent` may import `slurm_ext`, never the reverse.
- Each package of `slurm_ext` imports only the packages below it (LAYERS): the core at the
  bottom, the pure policy over it, the adapters (slurm, store) over those, the shells on top.
- The policy layer imports only the core's plain data (model, fields) and itself.
- No import cycle between modules, and at most a few loose modules at the top.
- Functions stay short outside the CLI (80 lines, 10 parameters).
- The product states reasons, not session or issue numbers; the benchmarks page and the
  service's example config stay small enough for an admin to read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "slurm_ext"

# package -> the packages of slurm_ext it may import (besides itself)
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "policy": {"core"},
    "slurm": {"core"},
    "store": {"core"},
    "templates": {"core"},
    "predict": {"core", "slurm", "store"},
    "sim": {"core", "policy", "slurm"},
    "service": {"core", "policy", "slurm", "store", "predict"},
    "userview": {"core", "policy", "store", "service"},
    "testing": {"core", "slurm", "store"},
    "replay": {"core", "policy", "slurm", "store", "sim", "service", "testing"},
    "demo": {"core", "slurm", "store", "testing"},
    "cli": {
        "core", "policy", "slurm", "store", "templates", "predict", "sim", "service",
        "userview", "testing", "replay",
    },
}  # fmt: skip
POLICY_MAY_IMPORT = ("slurm_ext.policy", "slurm_ext.core.model", "slurm_ext.core.fields")
MAX_TOP_LEVEL_MODULES = 6


def imported(path: Path) -> set[str]:
    """Module names `path` imports (absolute imports only), with `from X import y` also
    giving `X.y` so that a submodule imported by name counts."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def files(*parts: str) -> list[Path]:
    return sorted(ROOT.joinpath(*parts).rglob("*.py"))


def all_modules() -> dict[str, Path]:
    paths = files() + sorted((REPO / "nodeagent").rglob("*.py"))
    return {module_name(p): p for p in paths}


def package_of(module: str) -> str | None:
    """`slurm_ext.service.loop` -> "service"; a top-level module's own name; None outside."""
    parts = module.split(".")
    if parts[0] != "slurm_ext" or len(parts) < 2:
        return None
    return parts[1]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a name that is not a module resolves to
    the module that defines it)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {resolve(m) for m in imported(path)} - {None, name}
        graph[name] = {d for d in deps if d is not None}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_nodeagent_imports(path):
    bad = sorted(m for m in imported(path) if m == "nodeagent" or m.startswith("nodeagent."))
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_imports_only_the_layers_below(path):
    me = package_of(module_name(path))
    if me in (None, "__init__"):
        return
    assert me in LAYERS, f"{path.relative_to(REPO)}: package {me!r} has no place in LAYERS"
    allowed = LAYERS[me] | {me}
    bad = sorted(
        m
        for m in imported(path)
        if (p := package_of(m)) is not None and p not in allowed and p != "__version__"
    )
    assert not bad, f"{path.relative_to(REPO)} ({me}) imports {bad}"


@pytest.mark.parametrize("path", files("policy"), ids=lambda p: str(p.relative_to(ROOT)))
def test_policy_imports_no_adapter(path):
    ours = {m for m in imported(path) if m.split(".")[0] == "slurm_ext"}
    bad = sorted(m for m in ours if not _within(m, POLICY_MAY_IMPORT))
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_no_import_cycles():
    found = cycles(import_graph(all_modules()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_few_loose_modules():
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, loose


def test_the_checks_see_imports_and_cycles(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "import os\nfrom nodeagent import colocation\n"
        "def f():\n    import nodeagent.report\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from slurm_ext.sim import engine\n"
    )
    got = imported(p)
    assert {"os", "nodeagent", "nodeagent.colocation", "nodeagent.report"} <= got
    assert "slurm_ext.sim.engine" in got
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert not _within("slurm_ext.core.models", ("slurm_ext.core.model",))
    assert package_of("slurm_ext.service.loop") == "service"
    assert package_of("nodeagent.agent") is None


def test_the_report_format_is_one_module():
    """The agent's sender uses the service's format: the same objects, not a copy."""
    import nodeagent.report
    import slurm_ext.core.reports

    assert nodeagent.report.JobReport is slurm_ext.core.reports.JobReport
    assert nodeagent.report.encode_reports is slurm_ext.core.reports.encode_reports


MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10
MAX_BENCHMARK_PAGE_LINES = 400
MAX_SERVICE_TOML_KEYS = 25
NUMBERED_REFERENCE = re.compile(r"\b[Ss]ession [0-9]+\b|\b[Ii]ssue #?[0-9]+\b")


def long_functions(path: Path, repo: Path = REPO) -> list[str]:
    """Functions of `path` over MAX_FUNCTION_LINES lines or MAX_PARAMETERS parameters
    (self and cls not counted)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        count = len(params) + (a.vararg is not None) + (a.kwarg is not None)
        count -= bool(params) and params[0].arg in ("self", "cls")
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_FUNCTION_LINES or count > MAX_PARAMETERS:
            out.append(f"{path.relative_to(repo)}:{node.lineno} {node.name} ({lines} lines, "
                       f"{count} parameters)")  # fmt: skip
    return out


def test_short_functions_outside_the_cli():
    """The CLI's click commands take one parameter per option; everything else stays short."""
    paths = [p for p in all_modules().values() if "cli" not in p.relative_to(REPO).parts[1:2]]
    found = [f for p in paths for f in long_functions(p)]
    assert not found, found


def test_the_product_names_reasons_not_sessions_or_issues():
    roots = [ROOT, REPO / "nodeagent", REPO / "etc"]
    found = [
        f"{p.relative_to(REPO)}:{i}"
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.suffix in (".py", ".toml", ".lua", ".md", "")
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if NUMBERED_REFERENCE.search(line)
    ]
    assert not found, found


def test_the_admin_surface_stays_small():
    page = (REPO / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(page) <= MAX_BENCHMARK_PAGE_LINES
    toml = (REPO / "etc" / "service.toml").read_text().splitlines()
    keys = [s for s in toml if re.match(r"#? ?[a-z_]+ *= ", s)]  # set, or shown commented
    assert len(keys) <= MAX_SERVICE_TOML_KEYS, keys


def test_the_size_checks_can_fail(tmp_path):
    p = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    p.write_text(
        f"def long():\n{body}\n\ndef wide(self, a, b, c, d, e, f, g, h, i, j, k):\n    pass\n"
    )
    found = long_functions(p, tmp_path)
    assert found == [
        "m.py:1 long (81 lines, 0 parameters)",
        "m.py:83 wide (2 lines, 11 parameters)",
    ]
    assert NUMBERED_REFERENCE.search("see Session 6") and not NUMBERED_REFERENCE.search("sessions")
