"""On a live Slurm (priority/multifactor), the service notices when Slurm's own factors
outweigh the spacing of the values it writes: with a band too narrow for the jobs'
nice values, Slurm orders the queue against the service's order, the pass counts the
inverted neighbours and the service warns naming value_max; with a wide band it does not.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import cluster_options, hold_the_gpu, live_client, wait_for

from slurm_ext.policy import PolicyConfig
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

JOBS = 22  # 21 neighbour pairs: above the warning's floor of 20


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_slurm_reordering_the_queue_is_counted_and_named(
    tmp_path: Path, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    opts = cluster_options(version)
    with LocalCluster(
        nodes=1, gpus_per_node=1, root=tmp_path / "c", accounting=True, **opts
    ) as cluster:
        hold_the_gpu(cluster)
        # FIFO puts the first submitted first; each later job is 10 points less nice,
        # so Slurm puts it ahead unless the written values are more than 10 apart (nice stays
        # below the fair-share term, so no priority reaches Slurm's floor of 1)
        jobs = [
            cluster.sbatch("--gres=gpu:1", f"--nice={10 * (JOBS - k)}", wrap="sleep 60")
            for k in range(JOBS)
        ]
        client = live_client(cluster, "cli")
        for value_max, overruled in ((2 * JOBS, True), (100_000_000, False)):
            caplog.clear()
            store = Store(tmp_path / f"s{value_max}.db")
            cfg = ServiceConfig(
                store=str(store.path),
                port=0,
                history_source="store",
                value_max=value_max,
                policy=PolicyConfig(policy="fifo"),
            )
            service = Service(cfg, client, store)
            with caplog.at_level(logging.WARNING, logger="slurm_ext.service.loop"):
                first = service.run_pass()
                assert first.errors == 0 and sorted(first.planned) == sorted(jobs)
                # Slurm recomputes the priorities after the writes; the next pass reads them
                wait_for(
                    lambda s=service: s.run_pass().inversions[1] == JOBS - 1,
                    what="a pass that compares every neighbour",
                )
                res = service.run_pass()
            inverted, compared = res.inversions
            assert compared == JOBS - 1
            warned = "adjacent pending jobs against the service's order" in caplog.text
            if overruled:
                assert inverted == compared, res.inversions
                assert warned and f"raise value_max (now {value_max})" in caplog.text
            else:
                assert inverted == 0, res.inversions
                assert not warned
            store.close()
