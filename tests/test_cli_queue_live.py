"""`slurm-ext queue` against a real slurmctld: squeue's state codes (R, PD), times as
durations, and no "None" where Slurm gives a running job no pending reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_for

from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm
DURATION = re.compile(r"^(\d+s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh)$")


def slurm_ext(cluster: LocalCluster, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=cluster.env,  # this release's commands first on PATH
    )
    assert res.returncode == 0, f"slurm-ext {' '.join(args)}: {res.stdout}\n{res.stderr}"
    return res.stdout


def test_queue_shows_state_codes_and_durations(live, tmp_path: Path) -> None:
    c, client = live  # once per Slurm release and backend (conftest.LIVE_BACKENDS)
    backend = "pyslurm" if type(client).__name__ == "PySlurmClient" else "cli"
    config = tmp_path / "service.toml"
    config.write_text(
        f'store = "{tmp_path / "service.db"}"\nport = 0\ninterval_s = 0.5\n'
        f'[slurm]\nbackend = "{backend}"\nslurm_conf = "{c.conf_path}"\ntimeout_s = 10\n'
    )
    running = c.sbatch("-N4", "--gres=gpu:4", "-J", "blocker")  # every GPU
    pending = c.sbatch("--gres=gpu:1", "-J", "waiter")
    wait_for(
        lambda: f"{running} RUNNING" in c.run("squeue", "-h", "-o", "%i %T"), what="blocker runs"
    )
    # Slurm says "None" for a pending job until its scheduler has looked at it, and again
    # after a write to it (25.11): a second pass, once it has a reason, stores that reason
    for _ in range(2):
        wait_for(
            lambda: (
                c.run("squeue", "-h", "-j", str(pending), "-o", "%r").strip()
                in ("Resources", "Priority")
            ),
            what="Slurm gives the waiting job a reason",
        )
        slurm_ext(c, "serve", "--once", "--config", str(config))

    rows = {r["job_id"]: r for r in json.loads(slurm_ext(c, "queue", "--json", "--config", str(config)))["jobs"]}  # fmt: skip
    assert (rows[running]["state"], rows[running]["state_code"]) == ("RUNNING", "R")
    assert (rows[pending]["state"], rows[pending]["state_code"]) == ("PENDING", "PD")
    assert rows[running]["reason"] == ""  # Slurm says "None" for a running job
    assert rows[pending]["reason"] in ("Resources", "Priority")
    assert rows[running]["run_s"] >= 0 and rows[pending]["run_s"] is None

    lines = slurm_ext(c, "queue", "--config", str(config)).splitlines()
    head = lines[0].split()
    assert head[:4] == ["RANK", "JOBID", "USER", "ST"] and "None" not in "\n".join(lines)
    by_id = {int(ln.split()[1]): dict(zip(head, ln.split())) for ln in lines[1:3]}
    assert by_id[running]["ST"] == "R" and by_id[pending]["ST"] == "PD"
    assert by_id[running]["REASON"] == "-"  # nothing pending about it
    assert by_id[pending]["REASON"] == rows[pending]["reason"]
    for col in ("ATTAINED", "WAIT", "TIME"):
        assert DURATION.match(by_id[running][col]), (col, by_id[running][col])
    assert by_id[pending]["TIME"] == "-" and DURATION.match(by_id[pending]["WAIT"])
    assert re.match(r"last pass \S+ ago: ", lines[-1]), lines[-1]
