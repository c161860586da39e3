"""The user view's page in a real browser: headless Chromium renders `/` from a running
service (a subprocess on the harness's slurmctld, with its real store) and the rendered
DOM must show the queue in the service's order, each job's reasons, the free GPUs and
the fragmented ones. Skips, saying so, when Debian's `chromium` is not installed.

Set SLURM_EXT_USER_VIEW_PNG=docs/user-view.png to refresh the screenshot in the docs.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import free_port, wait_for
from test_service_live import start_service, stop, write_config

from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str, timeout: float = 120) -> str:
    """Run headless Chromium; its stdout. No sandbox: the tests may run as root."""
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--window-size=1280,820", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/install-deps.sh)")
def test_the_page_in_headless_chromium_shows_the_ranked_queue(clean_queue, tmp_path):
    c: LocalCluster = clean_queue
    me = getpass.getuser()  # the harness submits as this user
    # 4 nodes x 4 GPUs: node A keeps 2 GPUs free, the rest is full; two jobs wait
    small = c.sbatch("-N1", "--gres=gpu:2", "-J", "small")
    wide = c.sbatch("-N3", "--gres=gpu:4", "-J", "wide")
    wait_for(
        lambda: len(c.run("squeue", "-h", "-t", "R", "-o", "%i").split()) == 2,
        what="two jobs running",
    )
    # history: this user's "train" jobs finished within a minute, so the waiting train
    # job's index comes from that group; the other jobs read the pooled history
    train = f"train-{uuid.uuid4().hex[:6]}"  # a name no earlier job in Slurm carries
    rows = [(900 + i, 60.0 * (1 + i), 60.0, 1000.0 + i, me, train, "", 3600.0) for i in range(3)]
    rows += [(950 + i, 400.0 * (1 + i), 100.0, 1100.0 + i) for i in range(12)]
    store = Store(tmp_path / "service.db")
    store.save_jobs([], rows)
    store.close()
    four = c.sbatch("-N1", "--gres=gpu:4", "-J", "four")
    three = c.sbatch("-N1", "--gres=gpu:3", "-J", train)
    port = free_port()
    config = write_config(
        tmp_path / "service.toml",
        c,
        port=port,
        history_source='"store"',
        policy_gittins_kind_min_samples="3",
        # no user+gpus level: jobs of earlier tests on this cluster may fill it
        policy_gittins_kinds='["user+name", "user"]',
        policy_gittins_classes='"pooled"',
    )
    proc = start_service(config, tmp_path / "service.log")
    base = f"http://127.0.0.1:{port}"
    try:
        # the view refreshes from the store every few seconds: wait until it has all four
        def ranked() -> dict | None:
            doc = _json(base + "/v1/queue")
            rows = (doc or {}).get("jobs", [])
            ok = {r["job_id"] for r in rows if r["rank"] is not None} >= {small, wide, four, three}
            pending = [r for r in rows if r["state"] == "PENDING"]
            return doc if ok and pending and all(r["reason"] for r in pending) else None

        doc = wait_for(ranked, timeout=60, what="the view to show the four ranked jobs")
        dom = chromium("--dump-dom", base + "/")
        order = [int(m) for m in re.findall(r'<tr id="job-(\d+)"', dom)]
        assert order == [r["job_id"] for r in doc["jobs"]]  # the service's order
        assert set(order) == {small, wide, four, three}
        for r in doc["jobs"]:
            row = dom[dom.index(f'<tr id="job-{r["job_id"]}"') :].split("</tr>")[0]
            assert f">{r['state']}" in row and f"<b>{r['reason'] or '-'}</b>" in row, row
            assert "queue " in row and "attained" in row  # the service's reason
        assert dom.count('class="PENDING"') == 2 and dom.count('class="RUNNING"') == 2
        assert me in dom
        # free GPUs: 2 on the small job's node; both stranded (the widest waiting job needs 4)
        assert doc["free_gpus"] == {
            "free": 2, "widest_waiting": 4, "stranded": 2, "fragmentation": 1.0,
        }  # fmt: skip
        cards = dict(re.findall(r'<div class="card">([^<]+)<b>([^<]+)</b>', dom))
        assert cards["Free GPUs"] == "2" and cards["Fragmented"] == "2 GPUs", cards
        assert cards["Waiting jobs"] == "2" and cards["Running jobs"] == "2", cards
        assert "widest waiting job (4 GPUs)" in dom
        groups = {r["job_id"]: r["group"] for r in doc["jobs"]}
        # the train job reads its own kind, the other job its user's (3 completed jobs)
        assert groups[three] == f"user={me},name={train}" and groups[four] == f"user={me}", groups
        assert f"from user={me},name={train} (3 completed jobs)" in dom
        png = tmp_path / "user-view.png"
        chromium(f"--screenshot={png}", base + "/")
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        if target := os.environ.get("SLURM_EXT_USER_VIEW_PNG"):
            Path(target).write_bytes(data)
    finally:
        stop(proc)
