"""Configuration bounds (issue 15, items 9 and 16): every numeric key of every daemon's
config refuses NaN, infinities, negatives and absurd sizes (and 0 where 0 means nothing),
naming the key and the file; deeply nested TOML is refused before the parser recurses."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from nodeagent.config import AgentConfig
from slurm_ext.core.config import ConfigError, file_keys, load_config
from slurm_ext.policy import PolicyConfig
from slurm_ext.predict.cpu import PredictorFile
from slurm_ext.service.loop import ServiceConfig

CONFIGS = {"service": ServiceConfig, "agent": AgentConfig, "predictor": PredictorFile,
           "policy": PolicyConfig}  # fmt: skip
# keys where 0 means nothing (an interval, a timeout, a count, a size)
ZERO_MEANINGLESS = {
    "service": ["interval_s", "backoff_max_s", "sacct_days", "sacct_refresh_s", "value_min",
                "slurm.timeout_s", "predictor.rebuild_every_s", "policy.tuning.history_window",
                "policy.tuning.gittins_grid_start_gpu_s", "policy.tuning.gittins_grid_per_decade",
                "policy.tuning.gittins_class_min_samples",
                "policy.tuning.gittins_kind_min_samples"],
    "agent": ["interval_s", "gpu.simulated_count", "gpu.util_window_s", "gpu.energy_interval_s",
              "report.interval_s", "report.timeout_s", "report.spool_max_batches",
              "report.backoff_max_s", "jobs.timeout_s", "jobs.cache_s"],
    "predictor": ["predictor.min_samples", "predictor.min_cpus_per_gpu",
                  "predictor.max_cpus_per_gpu", "predictor.site_default_cpus_per_gpu"],
    "policy": ["tuning.history_window", "tuning.gittins_grid_start_gpu_s",
               "tuning.gittins_grid_per_decade", "tuning.gittins_class_min_samples",
               "tuning.gittins_kind_min_samples", "fairshare_calc_period_s"],
}  # fmt: skip
BAD = ("nan", "inf", "-inf", "-1", "1e300")
CLIS = {
    "service": [sys.executable, "-m", "slurm_ext.cli", "serve", "--once", "--config"],
    "agent": [sys.executable, "-m", "nodeagent.cli", "run", "--once", "--config"],
    "predictor": [sys.executable, "-m", "slurm_ext.cli", "predict", "build",
                  "--samples", "/dev/null", "--config"],
    "policy": [sys.executable, "-m", "slurm_ext.cli", "simulate", "--trace", "/dev/null",
               "--config"],
}  # fmt: skip


def numeric_keys(cls: type) -> list[tuple[str, str]]:
    """(dotted key, 'int' or 'float' or 'list') for every number a config file can set,
    where the file sets it (`[x.tuning]` tables, the simulator's keys in its policy file)."""
    out = []
    for key, tp in file_keys(cls, simulator=cls is PolicyConfig):
        if tp in (int, float):
            out.append((key, tp.__name__))
        elif typing.get_origin(tp) is list and typing.get_args(tp)[0] in (int, float):
            out.append((key, "list"))
    return out


def load(cls: type, path: Path) -> object:
    """As the daemon (or, for the policy file, `slurm-ext simulate`) reads it."""
    return load_config(cls, path, simulator=cls is PolicyConfig)


def toml_for(key: str, literal: str, kind: str) -> str:
    *tables, name = key.split(".")
    value = f"[{literal}]" if kind == "list" else literal
    return (f"[{'.'.join(tables)}]\n" if tables else "") + f"{name} = {value}\n"


def test_every_daemon_has_numeric_keys_to_check():
    counts = {daemon: len(numeric_keys(cls)) for daemon, cls in CONFIGS.items()}
    assert all(n >= 5 for n in counts.values()), counts


@pytest.mark.parametrize("daemon", sorted(CONFIGS))
def test_every_numeric_key_refuses_nan_infinities_negatives_and_absurd_sizes(daemon, tmp_path):
    cls = CONFIGS[daemon]
    path = tmp_path / f"{daemon}.toml"
    accepted = []
    for key, kind in numeric_keys(cls):
        for bad in BAD:
            literal = bad if kind != "int" or bad == "-1" else "-1"
            if kind == "int" and bad == "1e300":
                literal = str(10**15)
            path.write_text(toml_for(key, literal, kind))
            try:
                load(cls, path)
            except ConfigError as exc:
                assert str(path) in str(exc) and key.split(".")[-1] in str(exc), str(exc)
            else:
                accepted.append(f"{key} = {literal}")
    assert accepted == []


@pytest.mark.parametrize("daemon", sorted(CONFIGS))
def test_zero_is_refused_where_it_means_nothing(daemon, tmp_path):
    cls = CONFIGS[daemon]
    kinds = dict(numeric_keys(cls))
    path = tmp_path / f"{daemon}.toml"
    accepted = []
    for key in ZERO_MEANINGLESS[daemon]:
        path.write_text(toml_for(key, "0", kinds[key]))
        try:
            load(cls, path)
        except ConfigError as exc:
            assert str(path) in str(exc) and key.split(".")[-1] in str(exc), str(exc)
        else:
            accepted.append(key)
    assert accepted == []


def test_the_shipped_examples_still_load():
    etc = Path(__file__).resolve().parents[1] / "etc"
    load_config(ServiceConfig, etc / "service.toml")
    load_config(AgentConfig, etc / "agent.toml")
    load_config(PredictorFile, etc / "predictor.toml")


@pytest.mark.parametrize("shape", ["array", "inline_table", "string_is_not_nesting"])
def test_deep_nesting_is_refused_before_parsing(shape, tmp_path):
    path = tmp_path / "deep.toml"
    depth = 50_000
    body = {
        "array": "x = " + "[" * depth + "]" * depth,
        "inline_table": "x = " + "{a = " * depth + "1" + "}" * depth,
        "string_is_not_nesting": 'x = "' + "[" * depth + '"\n# ' + "{" * depth,
    }[shape]
    path.write_text(body + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(ServiceConfig, path)
    assert str(path) in str(err.value)
    if shape == "string_is_not_nesting":
        assert "unknown key" in str(err.value)  # parsed: only the key is wrong
    else:
        assert "nested" in str(err.value)


@pytest.mark.parametrize("daemon", sorted(CLIS))
def test_every_cli_reports_bad_config_without_a_traceback(daemon, tmp_path):
    for name, body in (("deep", "x = " + "[" * 20_000 + "]" * 20_000 + "\n"),
                       ("nan", toml_for(*numeric_keys(CONFIGS[daemon])[0][:1], "nan", "float"))):  # fmt: skip
        path = tmp_path / f"{name}.toml"
        path.write_text(body)
        res = subprocess.run([*CLIS[daemon], str(path)], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
        assert str(path) in res.stderr, res.stderr
