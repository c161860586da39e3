"""`serve` warns when a report secret is set but agents on other hosts cannot reach it."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
import urllib.request
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


# ---- what `serve` exits with when it cannot listen (etc/slurm-ext.service acts on it) ----

RESTART_PREVENT = "RestartPreventExitStatus="


def _serve_config(tmp_path: Path, listen: str, port: int) -> Path:
    secret = tmp_path / "report.secret"
    secret.write_text("x" * 64)
    secret.chmod(0o600)
    config = tmp_path / "service.toml"
    config.write_text(
        f'store = "{tmp_path / "service.db"}"\nlisten = "{listen}"\nport = {port}\n'
        f'report_secret_file = "{secret}"\nuser_view = "full"\ninterval_s = 60\n'
        f'slurm.backend = "cli"\nslurm.slurm_conf = "{tmp_path / "no-slurm.conf"}"\n'
        "slurm.timeout_s = 1\n"
    )
    return config


def _serve(config: Path, *setup: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`slurm-ext serve --config CONFIG`, after the Python statements in `setup`."""
    code = "; ".join(
        ["import sys", *setup, "from slurm_ext.cli import main",
         f"main(['serve', '--config', {str(config)!r}], prog_name='slurm-ext')"]
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SLURM_CONF": str(config.parent / "no-slurm.conf")},
    )


def _unit_prevents() -> set[int]:
    unit = (Path(__file__).parents[1] / "etc" / "slurm-ext.service").read_text()
    line = next(ln for ln in unit.splitlines() if ln.startswith(RESTART_PREVENT))
    return {int(v) for v in line[len(RESTART_PREVENT) :].split()}


@pytest.mark.parametrize(
    "listen, said",
    [
        ("no-such-host.invalid", "does not resolve"),
        ("192.0.2.1", "is not an address of this host"),  # TEST-NET-1: on no host
    ],
)
def test_a_listen_address_this_host_cannot_serve_is_a_config_error(tmp_path, listen, said):
    config = _serve_config(tmp_path, listen, 9788)
    out = _serve(config)
    assert out.returncode == 2 and out.returncode in _unit_prevents(), out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("slurm-ext: config error: ") and str(config) in last
    assert f"listen = {listen!r}" in last and said in last and "Traceback" not in out.stderr


def test_a_taken_port_is_retried_then_exits_with_a_status_the_unit_restarts(tmp_path):
    holder = socket.create_server(("127.0.0.1", 0))  # another user's process holds it
    port = holder.getsockname()[1]
    try:
        config = _serve_config(tmp_path, "127.0.0.1", port)
        t0 = time.monotonic()
        out = _serve(config, "import slurm_ext.cli.service as s", "s.PORT_WAIT_S = 3.0")
        took = time.monotonic() - t0
    finally:
        holder.close()
    assert out.returncode == 75 and 75 not in _unit_prevents(), out.stderr
    assert out.stderr.count("the port is taken") == 2  # after 1 s, then 2 s
    assert took >= 3.0 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert f"127.0.0.1:{port}" in last and "held the port for 3 s" in last
    assert "exiting with status 75 for systemd to restart" in last


def test_a_port_freed_while_serve_waits_is_taken(tmp_path):
    holder = socket.create_server(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    config = _serve_config(tmp_path, "127.0.0.1", port)
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_ext.cli", "serve", "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "SLURM_CONF": str(tmp_path / "no-slurm.conf")},
    )  # fmt: skip
    try:
        time.sleep(1.5)  # serve has found the port taken and waits
        holder.close()
        deadline = time.monotonic() + 30
        code = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    code = r.status
                break
            except OSError:
                time.sleep(0.3)
        assert code == 200, (tmp_path / "serve.log").read_text()
        assert "the port is taken" in (tmp_path / "serve.log").read_text()
    finally:
        holder.close()
        proc.terminate()
        proc.wait(30)
        log.close()


def test_listen_socket_says_which_key_is_wrong():
    from slurm_ext.service.listener import ListenAddressError, listen_socket

    for host, key in (("no-such-host.invalid", "listen"), ("192.0.2.1", "listen")):
        with pytest.raises(ListenAddressError) as caught:
            listen_socket(host, 0)
        assert caught.value.key == key
    if os.geteuid() != 0:
        with pytest.raises(ListenAddressError) as caught:
            listen_socket("127.0.0.1", 80)
        assert caught.value.key == "port"
    held = listen_socket("localhost", 0)
    try:
        assert held.family == socket.AF_INET  # IPv4 first, as before
        with pytest.raises(OSError) as taken:
            listen_socket("127.0.0.1", held.getsockname()[1])
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        held.close()
