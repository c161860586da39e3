"""TOML 1.0 in (tomllib), out (tomli-w), and the agent without nvidia-ml-py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ext.core import tomlio
from slurm_ext.core.config import ConfigError, load_config, to_table
from slurm_ext.replay.service import write_config
from slurm_ext.service.loop import ServiceConfig

REPO = Path(__file__).resolve().parents[1]


def test_a_toml_1_0_config_loads(tmp_path: Path) -> None:
    # Dotted keys and an array mixing integers and floats: valid TOML 1.0, refused by the
    # old `toml` package (TOML 0.5: "Not a homogeneous array").
    path = tmp_path / "service.toml"
    path.write_text(
        'partitions = ["gpu"]\n'
        'slurm.backend = "cli"\n'
        "policy.tuning.queue_thresholds_gpu_s = [3600, 14400.5, 57600, 230400]\n"
    )
    cfg = load_config(ServiceConfig, path)
    assert cfg.slurm.backend == "cli"
    assert cfg.policy.queue_thresholds_gpu_s == [3600.0, 14400.5, 57600.0, 230400.0]
    assert tomlio.loads('a = [1, "x"]') == {"a": [1, "x"]}


def test_invalid_toml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "service.toml"
    path.write_text("partitions = [\n")
    with pytest.raises(ConfigError, match=r"service\.toml: not valid TOML"):
        load_config(ServiceConfig, path)


def test_the_writer_round_trips_what_replay_writes(tmp_path: Path) -> None:
    path = write_config(tmp_path / "service.toml", "/tmp/x/slurm.conf", "gpu", 1500.0, True)
    data = tomlio.loads(path.read_text())
    assert data["partitions"] == ["gpu"] and data["preemption"] == "requeue"
    assert data["slurm"] == {"backend": "cli", "slurm_conf": "/tmp/x/slurm.conf", "timeout_s": 10.0}
    cfg = load_config(ServiceConfig, path)  # the service accepts it as it is
    assert cfg.policy.gittins_kinds == data["policy"]["tuning"]["gittins_kinds"]
    assert to_table(cfg.policy) == data["policy"]
    assert data["policy"]["tuning"]["queue_thresholds_gpu_s"] == cfg.policy.queue_thresholds_gpu_s
    assert "gittins_index" not in data["policy"] and "fairshare_weight" not in data["policy"]


def test_the_writer_round_trips_awkward_values() -> None:
    data = {
        "s": 'quote " backslash \\ tab \t newline \n del \x7f é',
        "key with space": 1,
        "neg": -3,
        "big": 1e20,
        "small": 2.5e-7,
        "whole": 3.0,
        "flags": [True, False],
        "mixed": [1, "x", 2.5],
        "empty": [],
        "t": {"a": 1, "u": {"deep": "y"}, "b": [0.5]},
        "after": {},
    }
    text = tomlio.dumps(data)
    assert tomlio.loads(text) == data
    assert isinstance(tomlio.loads(text)["whole"], float)


def test_the_writer_round_trips_non_finite_floats_and_arrays_of_tables() -> None:
    data = {"x": float("inf"), "t": {"y": [1.0, float("-inf")]}, "a": [{"b": 1}, {"c": "d"}]}
    assert tomlio.loads(tomlio.dumps(data)) == data
    nan = tomlio.loads(tomlio.dumps({"x": float("nan")}))["x"]
    assert nan != nan


@pytest.mark.parametrize("bad", [{"x": None}, {"t": {"y": [None]}}, {1: 2}])
def test_the_writer_refuses_what_toml_cannot_hold(bad: dict) -> None:
    with pytest.raises(TypeError):
        tomlio.dumps(bad)


def test_the_agent_without_nvidia_ml_py_names_the_extra_and_simulated_works(
    tmp_path: Path,
) -> None:
    # A real ImportError for pynvml (None in sys.modules), as in an install without [agent].
    run = (
        "import sys; sys.modules['pynvml'] = None\n"
        "from nodeagent.gpu import GpuUnavailable, NvmlGpuReader\n"
        "try:\n    NvmlGpuReader()\nexcept GpuUnavailable as exc:\n    print(exc)\n"
        "from nodeagent.cli import main\n"
        "sys.argv = ['slurm-ext-agent', 'show', '--wait', '0.1', '--config', sys.argv[1]]\n"
        "main()\n"
    )
    config = tmp_path / "agent.toml"
    config.write_text(
        '[gpu]\nbackend = "simulated"\nsimulated_count = 2\n[jobs]\nsource = "environ"\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", run, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    first, _, rest = out.stdout.partition("\n")
    assert "nvidia-ml-py is not installed" in first and "slurm-ext[agent]" in first
    assert "backend simulated" in rest and "GPU-sim-0001" in rest
