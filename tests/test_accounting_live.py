"""LocalCluster(accounting=True): a private MariaDB + slurmdbd; sacct reads jobs back."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cluster_options

from slurm_ext.core.model import CompletedJob
from slurm_ext.slurm import CliSlurmClient
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_accounting_cluster_records_jobs_in_sacct(tmp_path: Path, version: str) -> None:
    """On Debian's 22.05 and on 25.11 built from source (its own slurmdbd with the mysql
    plugin; gres/gpu in AccountingStorageTRES, which 25.11 accepts only with slurmdbd)."""
    opts = cluster_options(version)
    root = tmp_path / "c"
    with LocalCluster(nodes=1, gpus_per_node=2, root=root, accounting=True, **opts) as cluster:
        if version == "25.11":
            assert cluster.binary("slurmdbd").startswith(str(opts["prefix"]))
        job = cluster.sbatch("--gres=gpu:2", wrap="sleep 1")
        deadline = time.monotonic() + 60
        row = ""
        while time.monotonic() < deadline:
            out = cluster.run(
                "sacct", "-X", "-n", "-P", f"-j{job}", "-o", "JobIDRaw,State,AllocTRES"
            )
            row = out.strip()
            if "|COMPLETED|" in row:
                break
            time.sleep(0.5)
        fields = row.split("|")
        assert fields[:2] == [str(job), "COMPLETED"], row
        assert "gres/gpu=2" in fields[2]
        # the service's history reads it through the client (sacct + the parser)
        client = CliSlurmClient(slurm_conf=str(cluster.conf_path), bin_dir=cluster.bin_dir)
        since = time.time() - 3600
        (done,) = [j for j in client.completed_jobs(since) if j.job_id == job]
        assert done.gpus == 2 and done.run_s >= 1 and done.end_time <= time.time()
        if version == "25.11" and importlib.util.find_spec("pyslurm") is not None:
            # pyslurm.db gives the same record (its own process: pyslurm reads one
            # slurm.conf per process, and this cluster's is not the session's)
            script = (
                "import dataclasses, json, sys\n"
                "from slurm_ext.slurm.pyslurm_backend import PySlurmClient\n"
                "c = PySlurmClient(slurm_conf=sys.argv[1], bin_dir=sys.argv[2])\n"
                "print(json.dumps([dataclasses.asdict(j) for j in c.completed_jobs(float(sys.argv[3]))]))\n"
            )
            argv = [sys.executable, "-c", script, str(cluster.conf_path), str(cluster.bin_dir)]
            res = subprocess.run([*argv, str(since)], capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, res.stderr
            from_db = [CompletedJob(**d) for d in json.loads(res.stdout)]
            assert [j for j in from_db if j.job_id == job] == [done]
        # the multifactor weights that need slurmdbd are in force, not ignored
        log = cluster.log()
        assert "can only be used with SlurmDBD" not in log
        weights = cluster.run("sprio", "-w", "-h")
        assert "1000" in weights  # PriorityWeightAge / Fairshare
        # the database and slurmdbd are this cluster's own, in its directory
        assert (cluster.root / "db" / "data" / "mysql").is_dir()
        assert cluster.log("slurmdbd")
