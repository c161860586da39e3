"""The store under contention (issue 15, items 8, 13 and 15): one service per store, a
bounded WAL whatever a reader holds, and a clear refusal when a non-admin pins.
Real SQLite files, real processes, a real unprivileged user (nobody)."""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_ext.core.model import Job, JobState, Node
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import WAL_LIMIT_BYTES, Store
from slurm_ext.store.rows import JobRecord
from slurm_ext.testing.snapshot_client import ReplayClient

REPO = Path(__file__).resolve().parents[1]
SLURM_EXT = [sys.executable, "-m", "slurm_ext.cli"]


def service_toml(tmp_path: Path) -> Path:
    """A service whose Slurm is unreachable: it keeps running and backing off."""
    path = tmp_path / "service.toml"
    path.write_text(
        f'interval_s = 0.5\nstore = "{tmp_path / "s.db"}"\nport = 0\nhistory_source = "store"\n'
        f'[slurm]\nbackend = "cli"\nslurm_conf = "{tmp_path / "absent.conf"}"\ntimeout_s = 2\n'
    )
    return path


def test_a_second_service_on_one_store_says_why_and_exits_3(tmp_path):
    config = service_toml(tmp_path)
    log = open(tmp_path / "first.log", "wb")
    first = subprocess.Popen([*SLURM_EXT, "serve", "--config", str(config)], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "s.db.lock").exists() or not (tmp_path / "s.db").exists():
            assert first.poll() is None and time.monotonic() < deadline, "first did not start"
            time.sleep(0.1)
        time.sleep(0.5)
        try:
            second = subprocess.run([*SLURM_EXT, "serve", "--config", str(config)],
                                    capture_output=True, text=True, timeout=20)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail("a second service on the same store kept running")
        assert second.returncode == 3, second.stderr
        assert f"pid {first.pid}" in second.stderr and "s.db.lock" in second.stderr
        assert first.poll() is None  # the first one goes on
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
            first.wait(20)
        log.close()
    # the lock dies with its holder: the next service starts (its --once pass then fails
    # on the unreachable Slurm, status 1, not 3)
    again = subprocess.run([*SLURM_EXT, "serve", "--once", "--config", str(config)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 1, again.stderr


def test_systemd_does_not_restart_a_config_error_or_a_second_instance():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "etc" / "slurm-ext.service")
    statuses = unit["Service"]["RestartPreventExitStatus"].split()
    assert {"2", "3"} <= set(statuses) and unit["Service"]["Restart"] == "on-failure"


def _records(n: int, value: float) -> list[JobRecord]:
    return [
        JobRecord(
            job_id=j,
            user="u" * 40,
            partition="gpu",
            name="n" * 60,
            model_tag=None,
            gpus=1,
            submit_time=value,
            closed_gpu_s=value,
            closed_run_s=value,
            last_run_s=0.0,
            run_start=None,
            waiting_since=value,
            last_seen=value,
            state="PENDING",
            done=False,
        )  # fmt: skip
        for j in range(n)
    ]


def test_the_wal_is_truncated_once_a_reader_lets_go_and_a_reader_never_stalls_a_pass(
    tmp_path,
):
    cfg = ServiceConfig(store=str(tmp_path / "s.db"), port=0, history_source="store")
    store = Store(cfg.store)
    client = ReplayClient([Job(1, state=JobState.PENDING, gpus=1)], [Node("n1", gpus=4)])
    svc = Service(cfg, client, store)
    svc.run_pass(100.0)
    reader = sqlite3.connect(f"file:{cfg.store}?mode=ro", uri=True)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM jobs").fetchone()  # holds its snapshot
    for i in range(30):
        store.save_jobs(_records(3000, float(i)))
    held = store.wal_bytes()
    assert held > 2 * WAL_LIMIT_BYTES  # a held snapshot does grow it (SQLite cannot help)
    t0 = time.monotonic()
    svc.run_pass(200.0)
    assert time.monotonic() - t0 < 5  # the checkpoint does not wait for the reader
    reader.commit()
    reader.close()
    svc.run_pass(300.0)
    assert store.wal_bytes() <= WAL_LIMIT_BYTES, (held, store.wal_bytes())
    assert len(Store(cfg.store, readonly=True).jobs()) == 3000  # nothing lost


def test_a_cli_snapshot_releases_the_store_when_it_ends(tmp_path):
    writer = Store(tmp_path / "s.db")
    writer.save_jobs(_records(10, 1.0))
    reader = Store(tmp_path / "s.db", readonly=True)
    with reader.snapshot():
        assert len(reader.jobs()) == 10
        writer.save_jobs(_records(10, 2.0))
        assert not writer.checkpoint()  # held while the block runs
    assert writer.checkpoint() and writer.wal_bytes() == 0


@contextlib.contextmanager
def nobody_sandbox(
    prefix: str,
) -> Iterator[tuple[Path, Path, Callable[[str], subprocess.CompletedProcess]]]:
    """(the store, its service.toml, run) in a world-readable temporary directory, with
    `run(code)` running Python `code` as user nobody over a copy of the package (and
    click, tomli_w), as a user on a login node would."""
    py, runuser = shutil.which("python3", path="/usr/bin"), shutil.which("runuser")
    if py is None or runuser is None:
        pytest.fail("needs /usr/bin/python3 and runuser (Debian's python3 and util-linux)")
    import click
    import tomli_w

    root = Path(tempfile.mkdtemp(prefix=prefix))  # pytest's tmp dirs are 0700
    try:
        code = root / "code"
        # TOML is read by the stdlib (tomllib, Python 3.11 as /usr/bin/python3 on Debian 12)
        deps = [Path(click.__file__).parent, Path(tomli_w.__file__).parent]
        for pkg in (REPO / "slurm_ext", REPO / "nodeagent", *deps):
            shutil.copytree(pkg, code / pkg.name, ignore=shutil.ignore_patterns("__pycache__"))
        state = root / "state"
        state.mkdir()
        store = state / "service.db"
        Store(store).close()
        config = root / "service.toml"
        config.write_text(f'store = "{store}"\n')
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)

        def run(probe: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [runuser, "-u", "nobody", "--", py, "-c", probe],
                env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        yield store, config, run
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_pin_by_a_user_who_cannot_write_the_store_is_refused_clearly():
    with nobody_sandbox("slurm-ext-pin-") as (store, config, run):
        for cmd in ("pin", "unpin"):
            res = run(
                f"from slurm_ext.cli.service import {cmd}; {cmd}(['--config', {str(config)!r}, '42'])"
            )
            assert res.returncode == 1, (cmd, res.stderr)
            assert "Traceback" not in res.stderr, (cmd, res.stderr)
            assert re.search(r"cannot write the store .*service\.db", res.stderr), res.stderr
        assert Store(store, readonly=True).pins() == set()


def test_queue_by_a_user_who_cannot_read_the_store_is_told_to_ask_the_view():
    with nobody_sandbox("slurm-ext-queue-") as (store, config, run):
        store.chmod(0o640)  # as the service leaves it: its group reads
        for cmd, args in (("queue", []), ("explain", ["42"])):
            res = run(
                f"from slurm_ext.cli.inspect import {cmd}; {cmd}(['--config', {str(config)!r}, *{args!r}])"
            )
            assert res.returncode == 2, (cmd, res.stderr)
            lines = res.stderr.splitlines()
            assert len(lines) == 1, (cmd, res.stderr)
            assert "service.db: you cannot read the service's store" in lines[0], lines
            for how in ("--server http://", "SLURM_EXT_SERVER=", "/etc/slurm-ext/client.toml"):
                assert how in lines[0], lines
            assert "unable to open" not in lines[0]
        assert Store(store, readonly=True).pins() == set()  # root still reads


def test_pin_by_the_admin_still_works(tmp_path):
    config = tmp_path / "service.toml"
    config.write_text(f'store = "{tmp_path / "s.db"}"\n')
    env = dict(os.environ)
    res = subprocess.run([*SLURM_EXT, "pin", "--config", str(config), "7"], env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0 and Store(tmp_path / "s.db", readonly=True).pins() == {7}


def test_a_second_service_on_a_taken_port_says_why_and_exits_75(tmp_path):
    """A taken port is waited for (PORT_WAIT_S, shortened here), then `serve` exits 75,
    which the unit restarts (test_listen.py has the rest: the retries, a port freed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        (tmp_path / "b").mkdir()
        config = service_toml(tmp_path / "b")
        config.write_text(config.read_text().replace("port = 0", f"port = {port}"))
        code = (
            "import slurm_ext.cli.service as s; s.PORT_WAIT_S = 1.0; from slurm_ext.cli import main; "
            f"main(['serve', '--config', {str(config)!r}], prog_name='slurm-ext')"
        )
        res = subprocess.run([sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert res.returncode == 75 and "Traceback" not in res.stderr, res.stderr
    assert f"127.0.0.1:{port}" in res.stderr and "held the port" in res.stderr


def test_a_new_store_is_unreadable_to_other_users():
    """Item 8's unprivileged reader: a store the service creates is 0640 (its WAL and shm
    too), so a user outside its group cannot open it, let alone pin its WAL."""
    py, runuser = shutil.which("python3", path="/usr/bin"), shutil.which("runuser")
    if py is None or runuser is None:
        pytest.fail("needs /usr/bin/python3 and runuser (Debian's python3 and util-linux)")
    root = Path(tempfile.mkdtemp(prefix="slurm-ext-mode-"))  # pytest's tmp dirs are 0700
    try:
        root.chmod(0o755)
        db = root / "service.db"
        store = Store(db)
        store.save_jobs([], [(1, 10.0, 10.0, 100.0)])  # the WAL exists now
        modes = {p.name: p.stat().st_mode & 0o777 for p in root.iterdir()}
        assert modes["service.db"] == 0o640, modes
        assert modes.get("service.db-wal", 0o640) == 0o640, modes
        probe = (
            "import sqlite3, sys\n"
            "try:\n"
            f"    sqlite3.connect('file:{db}?mode=ro', uri=True).execute('BEGIN').execute("
            "'SELECT count(*) FROM completions').fetchall()\n"
            "except sqlite3.Error as e:\n"
            "    print('refused:', e); sys.exit(3)\n"
        )
        res = subprocess.run(
            [runuser, "-u", "nobody", "--", py, "-c", probe],
            env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert res.returncode == 3, (res.stdout, res.stderr)
        store.close()
        db.chmod(0o644)  # an admin's own choice is kept when the service opens it again
        Store(db).close()
        assert db.stat().st_mode & 0o777 == 0o644
    finally:
        shutil.rmtree(root, ignore_errors=True)
