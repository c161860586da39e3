"""Cost of the service's writes through the CLI backend on a real local slurmctld.

N held jobs; SiteFactor written one `scontrol update` per job (the old path, and still
the one for placement) against `set_site_factors` (one scontrol per 500 jobs on stdin).

    .venv/bin/python -m benchmarks.bench_writes [--jobs 1000] [--single 200]
"""

from __future__ import annotations

import argparse
import time

from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.testing.cluster import LocalCluster


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200, help="jobs written one by one")
    args = ap.parse_args()
    cluster = LocalCluster(nodes=1, gpus_per_node=1, cpus_per_node=4)
    cluster.start()
    try:
        ids = [
            int(cluster.run("sbatch", "--hold", "--parsable", "--wrap", "true").split(";")[0])
            for _ in range(args.jobs)
        ]
        client = CliSlurmClient(slurm_conf=cluster.env["SLURM_CONF"])
        t0 = time.perf_counter()
        for k, j in enumerate(ids[: args.single]):
            client.set_site_factor(j, 1000 + k)
        single = (time.perf_counter() - t0) / args.single
        t0 = time.perf_counter()
        failed = client.set_site_factors({j: 5000 + k for k, j in enumerate(ids)})
        batch = (time.perf_counter() - t0) / len(ids)
        assert not failed, failed
        print(f"jobs {args.jobs} held on a 1-node local cluster (Slurm's own scontrol)")
        print(f"{'path':<40} {'ms per job':>10}")
        print(f"{'one scontrol update per job':<40} {single * 1000:>10.2f}")
        print(f"{'set_site_factors (500 per scontrol)':<40} {batch * 1000:>10.2f}")
        print(f"ratio batch / single: {batch / single:.2f}")
        print(
            f"50,000 never-ranked jobs: {50_000 * single:.0f} s one by one, {50_000 * batch:.0f} s batched"
        )
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
