"""Layering: nodeagent may import slurm_ext, never the reverse (no module under slurm_ext
imports nodeagent, lazily or not: the report wire format is `slurm_ext.reports`, and the
demo starts the agent as its own process), and the policy layer imports nothing of
slurm_ext but the model and its own modules (no adapter, no loader: the TOML reading
stays in the shells)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "slurm_ext"


def imported(path: Path) -> set[str]:
    """Top-level module names `path` imports (absolute imports only; relative ones stay
    inside their package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):  # imports in functions too
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def files(*parts: str) -> list[Path]:
    return sorted(ROOT.joinpath(*parts).rglob("*.py"))


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_nodeagent_imports(path):
    bad = sorted(m for m in imported(path) if m == "nodeagent" or m.startswith("nodeagent."))
    assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"


@pytest.mark.parametrize("path", files("policy"), ids=lambda p: str(p.relative_to(ROOT)))
def test_policy_imports_no_adapter(path):
    ours = {m for m in imported(path) if m.split(".")[0] == "slurm_ext"}
    bad = sorted(m for m in ours if not _within(m, ("slurm_ext.policy", "slurm_ext.model")))
    assert not bad, f"{path.relative_to(ROOT.parent)} imports {bad}"


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_check_sees_imports(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "import os\nfrom nodeagent import colocation\nfrom . import x\n"
        "def f():\n    import nodeagent.report\n"
    )
    assert imported(p) == {"os", "nodeagent", "nodeagent.report"}
    assert not _within("slurm_ext.models", ("slurm_ext.model",))
    assert not _within("slurm_ext.config", ("slurm_ext.policy", "slurm_ext.model"))
    assert _within("slurm_ext.policy.fields", ("slurm_ext.policy",))


def test_the_report_format_is_one_module():
    """The agent's sender uses the service's format: the same objects, not a copy."""
    import nodeagent.report
    import slurm_ext.reports

    assert nodeagent.report.JobReport is slurm_ext.reports.JobReport
    assert nodeagent.report.encode_reports is slurm_ext.reports.encode_reports
