"""The admin's path from a built wheel: build it, install it into a fresh venv, and run the
admin guide's commands from that venv with the working directory outside the source tree.

The wheel is built offline (`pip wheel --no-build-isolation`, with the setuptools the test
extra installs) from a copy of the files a build reads, so the checkout is not written to.
It is installed by pip into a fresh venv with `--no-deps --no-index`; the venv gets the
dependencies (click, psutil, prometheus-client) through a .pth line naming this venv's
site-packages, added after its own, so nothing is downloaded. That is still a real
install: the package, its package data, its console scripts and the templates' data files
come from the wheel (asserted below), and the checkout is not on the venv's path (.pth
files in a directory named by a .pth line are not run, so our editable finder is not).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from slurm_ext.predict.hook import render_hook
from slurm_ext.testing.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "slurm_ext", "nodeagent", "etc")
BUILD_INPUTS += ("sbatch_templates",)


@dataclass
class WheelVenv:
    root: Path  # the fresh venv
    work: Path  # the admin's working directory, outside the source tree
    env: dict[str, str]

    def run(self, *args: str, stdin: str | None = None, ok: bool = True, env=None):
        out = subprocess.run(
            [str(self.root / "bin" / args[0]), *args[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.work,
            env=env or self.env,
            timeout=300,
        )
        if ok:
            assert out.returncode == 0, f"{args}: {out.stderr}"
        return out


def _run(cmd: list[str], cwd: Path) -> None:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout}\n{out.stderr}"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WheelVenv]:
    have = version("setuptools")
    if int(have.split(".")[0]) < 77:  # pyproject's license string needs 77
        pytest.fail(f"setuptools {have} cannot build the wheel: run pip install -e '.[test]'")
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv, work = tmp / "src", tmp / "dist", tmp / "venv", tmp / "work"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=ignore)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."], src)
    (wheel,) = dist.glob("slurm_ext-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([*pip, "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLURM_EXT_TEMPLATES")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    yield WheelVenv(venv, work, env)


def test_the_package_and_its_files_come_from_the_wheel(wheel_venv: WheelVenv) -> None:
    out = wheel_venv.run(
        "python",
        "-c",
        "import json, slurm_ext, nodeagent\n"
        "from slurm_ext.core.resources import shipped_file\n"
        "from slurm_ext.templates.render import templates_dir\n"
        "print(json.dumps([slurm_ext.__file__, nodeagent.__file__,"
        " str(shipped_file('job_submit.lua')), str(templates_dir())]))",
    )
    files = [Path(p) for p in json.loads(out.stdout)]
    for path in files:
        assert path.is_relative_to(wheel_venv.root), f"{path} is not from the installed wheel"
    assert files[2].is_file() and not files[2].is_symlink()
    assert (files[3] / "single-gpu.sbatch").is_file() and (files[3] / "train_tiny.py").is_file()


def test_the_admin_guide_commands_run_from_the_wheel(wheel_venv: WheelVenv) -> None:
    v, work = wheel_venv, wheel_venv.work
    assert v.run("slurm-ext", "--version").stdout.split()[-1]
    # Example files, as the guide copies them into /etc/slurm-ext and /etc/systemd/system.
    listed = v.run("slurm-ext", "example").stdout.split()
    assert {
        "service.toml",
        "agent.toml",
        "classes.toml",
        "job_submit.lua",
        "slurm-ext.service",
    } <= set(listed)
    assert json.loads(v.run("slurm-ext", "example", "--json").stdout) == listed
    for name in ("service.toml", "agent.toml", "slurm.conf.snippet", "slurm-ext-agent.service"):
        v.run("slurm-ext", "example", name, "-o", name)
        assert (work / name).read_text() == (REPO / "etc" / name).read_text()
    refused = v.run("slurm-ext", "example", "service.toml", "-o", "service.toml", ok=False)
    assert refused.returncode == 1 and "exists" in refused.stderr
    # The hook, rendered by the command the guide gives; refuses to overwrite without --force.
    table = str(work / "predictor.tsv")
    hook_args = ("slurm-ext", "predict", "hook", "--table", table, "--gpus-per-node", "4")
    v.run(*hook_args, "job_submit.lua")
    assert (work / "job_submit.lua").read_text() == render_hook(table, gpus_per_node=4)
    refused = v.run(*hook_args, "job_submit.lua", ok=False)
    assert refused.returncode == 1 and "--force" in refused.stderr
    v.run(*hook_args, "--force", "job_submit.lua")
    # The hook's dry run, before any table exists: it fails open (no changes).
    job = '{"comment": "model=resnet50", "tres_per_node": "gres:gpu:2"}'
    out = v.run("slurm-ext", "predict", "apply", "--table", table, "--dry-run", stdin=job)
    assert json.loads(out.stdout)["changes"] == {}
    # Templates, from the wheel's data files.
    assert "elastic" in v.run("slurm-ext", "template", "list").stdout
    v.run("slurm-ext", "template", "render", "elastic", "--set", "model=resnet50", "-o", "job.sh")
    assert "#SBATCH" in (work / "job.sh").read_text()
    # The README's first look: the shipped sample trace through the simulator.
    v.run("slurm-ext", "example", "traces/tiresias-60job.csv", "-o", "trace.csv")
    sim = ("slurm-ext", "simulate", "--trace", "trace.csv", "--nodes", "4", "--gpus-per-node", "4")
    assert "gittins" in v.run(*sim, "--compare", "fifo,gittins").stdout
    # The node agent (simulated GPUs) and a per-node report key.
    show = v.run("slurm-ext-agent", "show", "--backend", "simulated", "--wait", "0.1")
    assert "backend simulated" in show.stdout
    (work / "report.secret").write_text("s" * 64)
    (work / "report.secret").chmod(0o600)
    key = v.run("slurm-ext-agent", "report-key", "node1", "--master", "report.secret")
    assert len(key.stdout.strip()) >= 32


@pytest.mark.slurm
def test_the_wheel_runs_a_dry_run_pass_against_slurm(
    wheel_venv: WheelVenv, slurm_cluster: LocalCluster
) -> None:
    config = wheel_venv.work / "dry-run.toml"
    config.write_text(
        f'partitions = ["{slurm_cluster.partition}"]\n'
        f'store = "{wheel_venv.work / "service.db"}"\n'
        f'slurm.slurm_conf = "{slurm_cluster.conf_path}"\n'
    )
    env = {**wheel_venv.env, **slurm_cluster.env}
    env["PATH"] = f"{wheel_venv.root / 'bin'}:{env['PATH']}"
    out = wheel_venv.run(
        "slurm-ext", "serve", "--dry-run", "--once", "--config", str(config), env=env
    )
    assert "pass:" in out.stderr and "dry run" in out.stderr
