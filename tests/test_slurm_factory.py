"""make_client: which backend each name gives, and why.

The version probe runs the real `scontrol --version` against a minimal slurm.conf (no
daemons needed): Debian 12's Slurm is 22.05, and 25.11 when it is built (with pyslurm
25.11 in the venv, scripts/install-slurm2511.sh). `auto` takes pyslurm only where its
release matches the Slurm commands on PATH (which the pyslurm backend also runs for what
pyslurm cannot express); a host without pyslurm is simulated where a test needs one.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ext.slurm import CliSlurmClient, SlurmClient, SlurmError, factory, make_client
from slurm_ext.slurm.factory import parse_version, pyslurm_version, slurm_version
from slurm_ext.testing.cluster import slurm2511_prefix

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


@pytest.fixture
def no_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without pyslurm: `import pyslurm` fails and no metadata is found."""
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import -> ImportError
    monkeypatch.setattr(factory, "pyslurm_version", lambda: (None, "pyslurm is not installed"))
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


@pytest.mark.skipif(not HAVE_PYSLURM, reason="pyslurm is not installed")
def test_pyslurm_version_from_metadata() -> None:
    version, how = pyslurm_version()
    assert version == (25, 11) and how.startswith("pyslurm 25.11")


def _auto_in_subprocess(slurm_conf: str, path_prefix: str | None) -> subprocess.CompletedProcess:
    """make_client("auto") in a fresh process (pyslurm reads one slurm.conf per process)."""
    env = dict(os.environ)
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '')}"
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "from slurm_ext.slurm import make_client\n"
        f"print(type(make_client('auto', slurm_conf={slurm_conf!r}, timeout=10)).__name__)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(not HAVE_PYSLURM, reason="pyslurm is not installed")
def test_auto_keeps_cli_when_pyslurm_does_not_match(slurm_conf: str) -> None:
    """pyslurm 25.11 beside Debian's 22.05 commands: auto must not pick it."""
    res = _auto_in_subprocess(slurm_conf, None)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("CliSlurmClient"), res.stdout
    assert "does not match Slurm" in res.stdout


@pytest.mark.skipif(not HAVE_PYSLURM, reason="pyslurm is not installed")
def test_auto_picks_pyslurm_when_it_matches(slurm_conf: str) -> None:
    prefix, why = slurm2511_prefix()
    if prefix is None:
        pytest.skip(why)
    res = _auto_in_subprocess(slurm_conf, str(prefix / "bin"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("PySlurmClient"), res.stdout
    assert "Slurm backend: pyslurm (pyslurm 25.11" in res.stdout
