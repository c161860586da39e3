"""The user view and the local commands follow Slurm's PrivateData, on a real slurmctld
(Debian's 22.05) with `PrivateData=jobs,users`: the service reads it from slurmctld, its
view (default `user_view`) shows no user, job name or label naming one; `squeue` as an
ordinary user (nobody) shows only their job, and so do `slurm-ext queue/explain` run as
that user; a job name holding a terminal escape sequence reaches the terminal escaped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port, wait_for
from test_service_live import start_service, stop, write_config

from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster
from slurm_ext.userview.privacy import HIDDEN_GROUP

pytestmark = pytest.mark.slurm
TITLE = "\x1b]0;title\x07"  # sets a terminal's title


@pytest.fixture(scope="module")
def private() -> Iterator[LocalCluster]:
    c = LocalCluster(
        nodes=1,
        gpus_per_node=2,
        cpus_per_node=4,
        memory_mb=4000,
        extra_conf="PrivateData=jobs,users",
    )
    c.start()
    c.root.chmod(0o755)  # other users' Slurm commands read its slurm.conf
    (c.root / "jobs").chmod(0o777)  # and their jobs write their output there
    try:
        yield c
    finally:
        c.run("scancel", "--full", f"--partition={c.partition}", check=False)
        c.cleanup()


def test_the_service_reads_private_data_from_slurmctld(private):
    client = CliSlurmClient(slurm_conf=str(private.conf_path), timeout=20, bin_dir=private.bin_dir)
    assert client.private_data() == {"jobs", "users"}


def _as_nobody(private: LocalCluster, code: Path, *argv: str) -> subprocess.CompletedProcess:
    """`slurm-ext ARGV` as user nobody, with Debian's python3 and a copy of the code."""
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-m", "slurm_ext.cli", *argv],
        env={**private.env, "PYTHONPATH": str(code), "PATH": f"{private.env['PATH']}:/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, cwd="/",
    )  # fmt: skip


def _copy_code(dest: Path) -> None:
    """The suite and the packages it needs that Debian's python3 lacks."""
    import click
    import h11
    import prometheus_client
    import tomli_w

    repo = Path(__file__).resolve().parents[1]
    for m in (click, h11, prometheus_client, tomli_w):
        shutil.copytree(Path(m.__file__).parent, dest / m.__name__)
    for pkg in ("slurm_ext", "nodeagent"):
        shutil.copytree(repo / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except OSError:
        return 0, ""


def test_under_private_data_users_see_only_their_own_jobs_details(private):
    c = private
    work = Path(tempfile.mkdtemp(prefix="slurm-ext-private-"))  # pytest's tmp dirs are 0700
    try:
        work.chmod(0o755)
        secret = f"secret-{uuid.uuid4().hex[:6]}"
        now = time.time()
        history = [
            (900 + i, 60.0, 60.0, now - 50 + i, "root", secret, "", 3600.0) for i in range(5)
        ]
        history += [
            (950 + i, 90.0, 90.0, now - 50 + i, "root", TITLE, "", 3600.0) for i in range(5)
        ]
        store = Store(work / "service.db")
        store.save_jobs([], history)
        store.close()
        blocker = c.sbatch("-J", "blocker", "--gres=gpu:2")
        wait_for(
            lambda: f"{blocker} R" in c.run("squeue", "-h", "-o", "%i %t"), what="blocker runs"
        )
        hidden = c.sbatch("-J", secret, "--gres=gpu:1")
        titled = c.sbatch("-J", TITLE, "--gres=gpu:1")
        assert TITLE in c.run("squeue", "-h", "-j", str(titled), "-o", "%j")  # Slurm keeps ESC
        res = subprocess.run(
            ["sbatch", "--parsable", "--uid=nobody", f"--chdir={c.root}/jobs", "-J", "mine",
             "--gres=gpu:1", "--wrap=sleep 300"],
            env=c.env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        own = int(res.stdout.strip().split(";")[0])
        port = free_port()
        config = write_config(work / "service.toml", c, port=port, history_source='"store"')
        proc = start_service(config, work / "service.log")
        base = f"http://127.0.0.1:{port}"
        try:

            def ranked() -> dict | None:
                code, text = _get(base + "/v1/queue")
                rows = json.loads(text)["jobs"] if code == 200 else []
                ids = {r["job_id"] for r in rows if r["rank"] is not None}
                return json.loads(text) if ids >= {hidden, titled, own} else None

            doc = wait_for(ranked, timeout=60, what="the view to rank the jobs")
            log = (work / "service.log").read_text()
            assert "user view (anonymous from Slurm's PrivateData)" in log, log
            rows = {r["job_id"]: r for r in doc["jobs"]}
            assert rows[hidden]["group"] == rows[titled]["group"] == HIDDEN_GROUP
            for path in ("/v1/queue", "/", *(f"/v1/jobs/{j}" for j in (hidden, titled, own))):
                code, text = _get(base + path)
                assert code == 200, path
                for word in ("root", "nobody", secret, "user=", ",name=", "\x1b", "u001b"):
                    assert word not in text, (path, word)
            # the --server client prints the anonymous view; nothing to escape is left
            res = subprocess.run(
                [sys.executable, "-m", "slurm_ext.cli", "queue", "--server", base],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert res.returncode == 0 and str(titled) in res.stdout, res.stderr
        finally:
            stop(proc)
        # root (uid 0) sees every detail locally, the job name's escape sequence escaped
        res = subprocess.run(
            [sys.executable, "-m", "slurm_ext.cli", "explain", str(titled), "--config", str(config)],
            capture_output=True, text=True, timeout=60, env=c.env,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "\x1b" not in res.stdout and "\x07" not in res.stdout
        assert "from user=root,name=\\x1b]0;title\\x07 (5 completed jobs)" in res.stdout
        # an ordinary user: Slurm shows them their own job only, and so does slurm-ext
        code = work / "code"
        _copy_code(code)
        for p in [work, *work.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # as if nobody were in the store's group
        squeue = subprocess.run(
            ["runuser", "-u", "nobody", "--", "squeue", "-h", "-o", "%i"],
            env=c.env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert squeue.stdout.split() == [str(own)], squeue.stderr
        res = _as_nobody(c, code, "queue", "--json", "--config", str(config))
        assert res.returncode == 0, res.stderr
        assert [r["job_id"] for r in json.loads(res.stdout)["jobs"]] == [own]
        res = _as_nobody(c, code, "explain", str(hidden), "--json", "--config", str(config))
        assert res.returncode == 0, res.stderr
        info = json.loads(res.stdout)
        assert info["user"] == "" and info["group"] == HIDDEN_GROUP and info["rank"] is not None
        assert secret not in res.stdout and "root" not in res.stdout
        res = _as_nobody(c, code, "explain", str(own), "--json", "--config", str(config))
        assert res.returncode == 0 and json.loads(res.stdout)["user"] == "nobody", res.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)
