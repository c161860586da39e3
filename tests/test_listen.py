"""`serve` warns when a report secret is set but agents on other hosts cannot reach it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ext.service.reachability import is_loopback, report_listener_warnings


@pytest.mark.parametrize(
    "listen, loopback",
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("slurm-head", False),
    ],
)
def test_loopback_addresses(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_warnings_only_when_reports_are_expected_and_cannot_arrive() -> None:
    secret = "/etc/slurm-ext/report.secret"
    assert report_listener_warnings("127.0.0.1", 9788, None) == []  # no reports expected
    assert report_listener_warnings("0.0.0.0", 9788, secret) == []
    assert report_listener_warnings("10.0.0.1", 9788, secret) == []
    (loop,) = report_listener_warnings("127.0.0.1", 9788, secret)
    assert "127.0.0.1 only" in loop and 'listen = "0.0.0.0"' in loop
    (off,) = report_listener_warnings("0.0.0.0", 0, secret)
    assert "port = 0" in off


def test_serve_warns_at_start(tmp_path: Path) -> None:
    secret = tmp_path / "report.secret"
    secret.write_text("x" * 64)
    secret.chmod(0o600)
    config = tmp_path / "service.toml"
    config.write_text(
        f'store = "{tmp_path / "service.db"}"\n'
        f'report_secret_file = "{secret}"\n'
        f'slurm.slurm_conf = "{tmp_path / "no-slurm.conf"}"\n'
        "slurm.timeout_s = 1\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", "serve", "--once", "--dry-run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SLURM_CONF": str(tmp_path / "no-slurm.conf")},
    )  # fmt: skip
    first = out.stderr.splitlines()[0]
    assert "WARNING" in first and "listener is on 127.0.0.1 only" in first, out.stderr
