"""The submit hook never makes slurmctld reject a job it would accept without the hook.

A grid of sbatch option sets (every way to ask for GPUs, with node counts, tasks, memory
per CPU and --exclusive) is submitted to the session cluster without the hook, then to a cluster of the
same shape with the hook and a table that asks for a whole node's cores per GPU (16 on
16-core 4-GPU nodes) and 8 GPUs for elastic jobs. Every set accepted without the hook must
be accepted with it, on each Slurm release. Each set goes through `sbatch --test-only`:
slurmctld runs the hook and answers whether and where the job could start, creating no job
(a held submission alone is not enough: 22.05 accepts a job no node can ever run).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from conftest import SLURM_VERSIONS, cluster_options

from slurm_ext.predict.hook import render_hook
from slurm_ext.predict.table import TableRow, atomic_write, render_table
from slurm_ext.testing.cluster import LocalCluster

pytestmark = pytest.mark.slurm

TABLE = render_table([TableRow("big", "*", 16, gpus=8)])
GPU_OPTIONS = [
    ["--gpus=1"],
    ["--gpus=2"],
    ["--gpus=4"],
    ["--gpus=8"],
    ["--gres=gpu:1"],
    ["--gres=gpu:2"],
    ["--gres=gpu:4"],
    ["--gpus-per-node=1"],
    ["--gpus-per-node=2"],
    ["--gpus-per-node=4"],
]
TASK_OPTIONS = [
    ["--gpus-per-task=1", "-n", "2"],
    ["--gpus-per-task=2", "-n", "2"],
    ["--gpus-per-task=1", "-n", "4"],
]
EXTRAS = [
    [], ["-N", "2"], ["-n", "4"], ["--mem-per-cpu=3000"], ["--exclusive"], ["-n", "16"],
    ["-n", "24"], ["-n", "16", "-N", "2"],
]  # fmt: skip
OPTION_SETS = (
    [g + e + ["--comment=model=big"] for g in GPU_OPTIONS for e in EXTRAS]
    + [t + e + ["--comment=model=big"] for t in TASK_OPTIONS for e in ([], ["-N", "2"])]
    + [
        ["--gres=gpu:1", "--comment=model=big elastic=1-8"],
        ["--gpus-per-node=2", "-N", "2", "--comment=model=big elastic=2-8"],
    ]
)


@pytest.fixture(scope="module", params=SLURM_VERSIONS)
def pair(request, tmp_path_factory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    """(the session cluster without the hook, the same shape with it) for one release."""
    options = cluster_options(request.param)
    plain = request.getfixturevalue(
        "slurm_cluster" if request.param == "22.05" else "slurm2511_cluster"
    )
    root = tmp_path_factory.mktemp("hookgrid")
    table = root / "predictor.tsv"
    atomic_write(table, TABLE)
    hooked = LocalCluster(
        nodes=plain.nodes,
        gpus_per_node=plain.gpus_per_node,
        cpus_per_node=plain.cpus_per_node,
        memory_mb=plain.memory_mb,
        root=root,
        job_submit_lua=render_hook(table, gpus_per_node=plain.gpus_per_node),
        **options,
    )
    hooked.start()
    try:
        yield plain, hooked
    finally:
        hooked.cleanup()


def accepted(cluster: LocalCluster, args: list[str]) -> tuple[bool, str]:
    """Whether slurmctld would accept and could start the job, and what sbatch said."""
    res = subprocess.run(
        ["sbatch", "--test-only", f"--chdir={cluster.root}/jobs", *args, "--wrap=true"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return res.returncode == 0, (res.stderr.strip() or res.stdout.strip())


def test_every_set_accepted_without_the_hook_is_accepted_with_it(pair) -> None:
    plain, hooked = pair
    without = {" ".join(a): accepted(plain, a) for a in OPTION_SETS}
    with_hook = {" ".join(a): accepted(hooked, a) for a in OPTION_SETS}
    ok = [k for k, (good, _) in without.items() if good]
    rejected = {k: with_hook[k][1] for k in ok if not with_hook[k][0]}
    assert not rejected, f"{len(rejected)} of {len(ok)} rejected only with the hook: {rejected}"
    # the grid is worth something: most sets are valid, and the hook did rewrite them
    assert len(ok) >= 40, [k for k in without if k not in ok]
    # every core of an --exclusive job's nodes is its own: its CPUs are left alone
    whole = [k for k in ok if "--exclusive" in k]
    assert whole and not [k for k in whole if "cpus_per_tres" in with_hook[k][1]], with_hook
    told = [with_hook[k][1] for k in ok if k not in whole and "slurm-ext:" in with_hook[k][1]]
    assert len(told) >= len(ok) - len(whole) - 2, with_hook
    assert any("capped from 16" in m for m in told) and any("tres_per_node" in m for m in told)
