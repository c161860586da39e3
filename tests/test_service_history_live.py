"""Every run reaches the service's Gittins history on a real slurmctld, the sub-second
ones too: Slurm times runs in whole seconds, so a job that ends in the second it started
has StartTime == EndTime, and the service used to drop it (issue 13: 13 of 100 jobs of a
synth2 replay at speedup 1,500, the shortest, were missing from its history)."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import wait_for
from test_service_live import start_service, stop, write_config

pytestmark = pytest.mark.slurm

JOBS = 6  # each runs `true`: most start and end within one of Slurm's seconds


def test_sub_second_runs_are_completions(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(tmp_path / "service.toml", c, history_source='"store"')
    service = start_service(config, tmp_path / "service.log")
    db = tmp_path / "service.db"
    try:
        wait_for(db.exists, what="the service's store")
        jobs = [c.sbatch("--gres=gpu:1", "-J", f"short-{k}", wrap="true") for k in range(JOBS)]

        def ended() -> bool:
            out = c.run("squeue", "-h", "-t", "all", "-j", ",".join(map(str, jobs)), "-o", "%T")
            return out.split() == ["COMPLETED"] * JOBS

        wait_for(ended, timeout=60, what="the short jobs completed")

        def recorded() -> set[int]:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
                return {j for (j,) in con.execute("SELECT job_id FROM completions")}

        wait_for(lambda: set(jobs) <= recorded(), timeout=20, what="every run in the history")
        times = c.run("squeue", "-h", "-t", "all", "-j", ",".join(map(str, jobs)), "-o", "%S %e")
        zero = sum(1 for line in times.splitlines() if len(set(line.split())) == 1)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            rows = dict(con.execute("SELECT job_id, run_s FROM completions"))
        # what the service learnt is Slurm's whole-second run length, 0 included
        assert all(rows[j] >= 0 and rows[j] == int(rows[j]) for j in jobs), rows
        print(f"{zero} of {JOBS} runs timed at 0 s by Slurm")
    finally:
        stop(service)
