"""The `slurm-ext` command line as one package: the commands it lists, click kept inside
slurm_ext/cli, `--json` on every command that prints data (parsed here), the shared
output helpers, and `--plot` refused before a simulation starts when matplotlib is missing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ext.cli import main
from slurm_ext.cli.output import Column, duration, table
from slurm_ext.core.model import JobState
from slurm_ext.predict.elastic import amdahl_throughput

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "tests" / "data" / "tiresias-60job.csv")
# what `slurm-ext --help` listed before the commands moved into slurm_ext/cli/, and
# `example` (the shipped etc/ files, added with the wheel install)
COMMANDS = {
    "energy", "example", "explain", "nodes", "pin", "predict", "queue", "replay", "serve",
    "simulate", "template", "trace", "unpin",
}  # fmt: skip


def help_commands(argv: list[str]) -> set[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("Commands:\n", 1)[1].splitlines()
    return {ln.split()[0] for ln in lines if ln.startswith("  ")}


def test_help_lists_the_same_commands_from_module_and_console_script() -> None:
    assert help_commands([sys.executable, "-m", "slurm_ext.cli", "--help"]) == COMMANDS
    script = Path(sys.executable).parent / "slurm-ext"  # the pyproject entry point
    if not script.exists():
        pytest.skip("no slurm-ext console script beside this interpreter")
    assert help_commands([str(script), "--help"]) == COMMANDS


def test_click_is_imported_only_by_the_cli_modules() -> None:
    offenders = []
    for path in sorted((ROOT / "slurm_ext").rglob("*.py")):
        if path.parent.name == "cli" and path.parent.parent.name == "slurm_ext":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "click" or n.startswith("click.") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_duration_and_table() -> None:
    assert [duration(s) for s in (-3, 0, 59.4, 60, 185, 3720, 86399, 93600)] == [
        "0s", "0s", "59s", "1m00s", "3m05s", "1h02m", "23h59m", "1d02h",
    ]  # fmt: skip
    cols = (Column("ID", "id", right=True), Column("NAME", "name", width=3), Column("T", "t"))
    out = table([{"id": 7, "name": "alpha", "t": None}, {"id": 123, "name": "", "t": 1}], cols)
    assert out.splitlines() == [" ID  NAME  T", "  7  alp   -", "123  -     1"]
    assert JobState.RUNNING.code == "R" and JobState.PENDING.code == "PD"
    assert JobState.COMPLETING.code == "CG" and JobState.OTHER.code == "?"


def test_template_list_and_check_json(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["template", "list", "--json"])
    assert res.exit_code == 0, res.output
    shipped = {t["name"]: t for t in json.loads(res.output)["templates"]}
    text = runner.invoke(main, ["template", "list"]).output
    assert sorted(shipped) == [ln.split(":")[0] for ln in text.splitlines() if ln[:1] != " "]
    single = {v["name"]: v for v in shipped["single-gpu"]["variables"]}
    assert "model" in single and single["model"]["type"] and single["model"]["description"]

    good = tmp_path / "good.sh"
    res = runner.invoke(main, ["template", "render", "single-gpu", "-o", str(good)])
    assert res.exit_code == 0, res.output
    bad = tmp_path / "bad.sh"
    bad.write_text(good.read_text() + "echo {{model}}\n")
    res = runner.invoke(main, ["template", "check", "--json", str(good), str(bad)])
    assert res.exit_code == 1  # the exit status still says an error was found
    files = json.loads(res.stdout)["files"]
    assert [(f["path"], f["ok"]) for f in files] == [(str(good), True), (str(bad), False)]
    assert files[0]["problems"] == []
    (problem,) = files[1]["problems"]
    assert problem["severity"] == "error" and "unfilled placeholder {{model}}" in problem["message"]
    assert problem["line"] == len(bad.read_text().splitlines())


def test_predict_build_show_elastic_json(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text(
        "".join(
            json.dumps(
                {
                    "key": "resnet50",
                    "gpu_type": "v100",
                    "cores_per_gpu": c,
                    "gpu_util": round(0.9 * min(1.0, c / 7), 3),
                }  # fmt: skip
            )
            + "\n"
            for c in (2, 4, 6, 8, 10, 12)
        )
    )
    wl = tmp_path / "elastic.json"
    bert = {"min_gpus": 1, "max_gpus": 4, "throughput": list(amdahl_throughput(0.05, 4))}
    wl.write_text(json.dumps([{"key": "bert", **bert}, {"key": "gpt", **bert}]))
    out = tmp_path / "t.tsv"
    runner = CliRunner()
    args = ["predict", "build", "--samples", str(samples), "--out", str(out)]
    res = runner.invoke(main, [*args, "--elastic", str(wl), "--free-gpus", "3", "--json"])
    assert res.exit_code == 0, res.output
    built = json.loads(res.output)
    assert built["table"] == str(out) and built["samples"] == 6 and built["fitted"] >= 1
    assert built["rows"] >= 3 and sum(built["elastic_gpus"].values()) == 3

    res = runner.invoke(main, ["predict", "show", "resnet50", "--table", str(out), "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    typed = {r["gpu_type"]: r for r in shown["rows"]}
    assert shown["in_table"] and typed["v100"]["evidence"]["source"] == "fit"
    assert 5 <= typed["v100"]["cpus_per_gpu"] <= 9  # the knee at 7 cores/GPU
    text = runner.invoke(main, ["predict", "show", "resnet50", "--table", str(out)]).output
    assert f"gpu_type=v100: {typed['v100']['cpus_per_gpu']} cores/GPU" in text
    res = runner.invoke(main, ["predict", "show", "nope", "--table", str(out), "--json"])
    missing = json.loads(res.output)
    assert missing["in_table"] is False and missing["rows"] == []
    assert missing["site_default_cpus_per_gpu"] > 0

    res = runner.invoke(main, ["predict", "elastic", "--workloads", str(wl), "--free-gpus", "3"])
    text_rows = [ln.split("\t") for ln in res.output.splitlines()]
    res = runner.invoke(
        main, ["predict", "elastic", "--workloads", str(wl), "--free-gpus", "3", "--json"]
    )
    assert res.exit_code == 0, res.output
    split = json.loads(res.output)
    assert split["free_gpus"] == 3
    assert [[w["key"], str(w["gpus"])] for w in split["workloads"]] == text_rows
    assert sum(w["gpus"] for w in split["workloads"]) == 3


def test_plot_without_matplotlib_fails_before_simulating() -> None:
    # 8-GPU jobs on a 4-GPU cluster: the simulation would fail ("needs 8 GPUs"); the
    # --plot check must come first, when the options are read
    probe = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from slurm_ext.cli import main\n"
        f"main(['simulate', '--trace', {TRACE!r}, '--nodes', '1', '--gpus-per-node', '4',"
        " '--plot', 'x.png'], prog_name='slurm-ext')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert res.returncode == 2, res.stderr
    assert "--plot" in res.stderr and "needs matplotlib" in res.stderr
    assert "slurm-ext[plot]" in res.stderr and "needs 8 GPUs" not in res.stderr
    assert res.stdout == "" and not (ROOT / "x.png").exists()
    # with matplotlib the same command reaches the simulation and its own error
    res = CliRunner().invoke(
        main, ["simulate", "--trace", TRACE, "--nodes", "1", "--gpus-per-node", "4"]
    )
    assert res.exit_code == 1 and "needs 8 GPUs, the cluster has 4" in res.output
