"""make_client: which backend each name gives, and why, on this host (no pyslurm here).

The version probe runs the real `scontrol --version` against a minimal slurm.conf (no
daemons needed); Debian 12's Slurm is 22.05.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest

from slurm_ext.slurm import CliSlurmClient, SlurmClient, SlurmError, make_client
from slurm_ext.slurm.factory import parse_version, pyslurm_version, slurm_version


@pytest.fixture
def no_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host has no pyslurm; fail (not skip) if that ever changes, the tests assume it."""
    assert importlib.util.find_spec("pyslurm") is None, "pyslurm is installed in this venv"
    monkeypatch.delenv("SLURM_CONF", raising=False)


@pytest.fixture
def slurm_conf(tmp_path: Path) -> str:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=probe\nSlurmctldHost=localhost\n")
    return str(conf)


def test_cli_backend_by_name(slurm_conf: str) -> None:
    client = make_client("cli", slurm_conf=slurm_conf, timeout=5)
    assert isinstance(client, CliSlurmClient)
    assert isinstance(client, SlurmClient)
    assert client.timeout == 5


def test_auto_without_pyslurm_is_cli(no_pyslurm: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="slurm_ext.slurm"):
        client = make_client("auto")
    assert isinstance(client, CliSlurmClient)
    assert "Slurm backend: cli (pyslurm is not installed)" in caplog.text


def test_forced_pyslurm_without_pyslurm_explains(no_pyslurm: None) -> None:
    with pytest.raises(SlurmError) as info:
        make_client("pyslurm")
    assert info.value.command == "import pyslurm"
    assert "install slurm-ext[pyslurm] matching your Slurm release" in info.value.message
    assert "pyslurm" not in sys.modules


def test_unknown_backend_names_allowed_values() -> None:
    with pytest.raises(ValueError, match="'slurmrestd'.*auto, pyslurm, cli"):
        make_client("slurmrestd")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("slurm 22.05.8", (22, 5)),
        ("slurm-wlm 22.05.8", (22, 5)),
        ("slurm 25.11.0-rc1", (25, 11)),
        ("25.11.2", (25, 11)),
        ("no version here", None),
    ],
)
def test_parse_version(text: str, want: tuple[int, int] | None) -> None:
    assert parse_version(text) == want


def test_slurm_version_from_real_scontrol(slurm_conf: str) -> None:
    version, how = slurm_version(slurm_conf, timeout=10)
    assert version == (22, 5), how
    assert "scontrol --version" in how


def test_slurm_version_reports_why_not(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("ClusterName=probe\n")  # no SlurmctldHost: scontrol refuses it
    version, why = slurm_version(str(bad), timeout=10)
    assert version is None
    assert "scontrol --version failed" in why and "sinfo --version failed" in why


def test_pyslurm_version_without_pyslurm(no_pyslurm: None) -> None:
    assert pyslurm_version() == (None, "pyslurm is not installed")
