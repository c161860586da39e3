"""Layering: nodeagent may import slurm_ext, never the reverse (for the policy layer and
the simulator, where the co-location decisions once came from nodeagent), and the policy
layer imports no adapter (only the model, the config loader, its own modules and
third-party libraries)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "slurm_ext"


def imported(path: Path) -> set[str]:
    """Top-level module names `path` imports (absolute imports only; relative ones stay
    inside their package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def files(*parts: str) -> list[Path]:
    return sorted(ROOT.joinpath(*parts).rglob("*.py"))


@pytest.mark.parametrize("path", files("policy") + files("sim") + [ROOT / "coloc_history.py"])
def test_no_nodeagent_imports(path):
    bad = sorted(m for m in imported(path) if m == "nodeagent" or m.startswith("nodeagent."))
    assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"


@pytest.mark.parametrize("path", files("policy"))
def test_policy_imports_no_adapter(path):
    ours = {m for m in imported(path) if m.split(".")[0] == "slurm_ext"}
    allowed = ("slurm_ext.policy", "slurm_ext.model", "slurm_ext.config")
    bad = sorted(m for m in ours if not m.startswith(allowed))
    assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"


def test_the_check_sees_imports(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\nfrom nodeagent import colocation\nfrom . import x\n")
    assert imported(p) == {"os", "nodeagent"}
