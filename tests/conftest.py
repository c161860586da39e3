"""Shared fixtures: a live local Slurm cluster for tests marked `slurm`.

If the daemons cannot start the tests error loudly (never skip): the whole point of
these tests is the real slurmctld.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.cgroups import read_mounts
from nodeagent.testing import SlurmLikeCgroups
from slurm_ext.slurm import CliSlurmClient, SlurmClient
from slurm_ext.store.db import Store
from slurm_ext.store.schema import MIGRATIONS
from slurm_ext.testing.cluster import LocalCluster, free_ports, slurm2511_prefix

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
SNIPPET = REPO / "etc" / "slurm.conf.snippet"
# The Slurm releases the live tests run on: Debian 12's, and 25.11 built from the vendored
# source by scripts/install-slurm2511.sh (its tests skip, saying why, when it is not built).
SLURM_VERSIONS = ["22.05", "25.11"]


def cluster_options(version: str) -> dict:
    """LocalCluster keyword arguments for a Slurm release; skips when it is not installed."""
    if version == "22.05":
        return {}
    prefix, why = slurm2511_prefix()
    if prefix is None:
        pytest.skip(why)
    return {"prefix": prefix}


def gres(version: str, text: str) -> str:
    """A TRES string as `version` spells it: 22.05 `gres:gpu:2`, 23.02+ `gres/gpu:2`."""
    return text if version == "22.05" else text.replace("gres:", "gres/")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalCluster]:
    """One 4-node x 4-GPU cluster for the session (Debian's Slurm); tests cancel their jobs."""
    cluster = LocalCluster(nodes=4, gpus_per_node=4, cpus_per_node=16)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture(scope="session")
def slurm2511_cluster() -> Iterator[LocalCluster]:
    """The same cluster on Slurm 25.11 built from source; skips when it is not built."""
    cluster = LocalCluster(nodes=4, gpus_per_node=4, cpus_per_node=16, **cluster_options("25.11"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


# (Slurm release, backend) pairs the live contract and service tests run on: the CLI
# backend on both releases, pyslurm on 25.11 (pyslurm 25.11 is built against it).
LIVE_BACKENDS = ["22.05-cli", "25.11-cli", "25.11-pyslurm"]


def session_cluster(request: pytest.FixtureRequest, version: str) -> LocalCluster:
    return request.getfixturevalue("slurm_cluster" if version == "22.05" else "slurm2511_cluster")


def live_client(cluster: LocalCluster, backend: str) -> SlurmClient:
    """A client of `backend` for `cluster`; skips pyslurm when it is not installed."""
    if backend == "cli":
        return CliSlurmClient(
            slurm_conf=str(cluster.conf_path), timeout=20, bin_dir=cluster.bin_dir
        )
    if importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (scripts/install-slurm2511.sh builds it)")
    from slurm_ext.slurm.pyslurm_backend import PySlurmClient

    return PySlurmClient(slurm_conf=str(cluster.conf_path), bin_dir=cluster.bin_dir)


@pytest.fixture(params=LIVE_BACKENDS)
def live(request: pytest.FixtureRequest) -> Iterator[tuple[LocalCluster, SlurmClient]]:
    """(a session cluster with an empty queue, a client) for each release and backend."""
    version, backend = request.param.split("-")
    cluster = session_cluster(request, version)
    _cancel_all(cluster)
    yield cluster, live_client(cluster, backend)
    _cancel_all(cluster)


@pytest.fixture
def clean_queue(slurm_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster with an empty queue before and after the test."""
    _cancel_all(slurm_cluster)
    yield slurm_cluster
    _cancel_all(slurm_cluster)


def _cancel_all(cluster: LocalCluster) -> None:
    """Cancel every job in the cluster's partitions and wait until none is left."""
    for partition in cluster.partition_names:
        cluster.run("scancel", "--full", f"--partition={partition}", check=False)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out = cluster.run("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i", check=False)
        if not out.strip():
            return
        time.sleep(0.2)
    raise RuntimeError(f"jobs still present after scancel: {out.split()}")


@pytest.fixture(scope="module", params=SLURM_VERSIONS)
def hetero(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A heterogeneous cluster (partitions a100 and h100 of typed nodes, a GPU-per-user
    QOS) for one test module and Slurm release."""
    from slurm_ext.testing.record_cluster import heterogeneous_cluster

    prefix = cluster_options(request.param).get("prefix")
    cluster = heterogeneous_cluster(prefix, root=tmp_path_factory.mktemp("hetero") / "c")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def empty(hetero: LocalCluster) -> Iterator[LocalCluster]:
    """The module's heterogeneous cluster with no job before and after the test."""
    _cancel_all(hetero)
    yield hetero
    _cancel_all(hetero)


def free_port() -> int:
    """A loopback port free now, the kernel's pick (test workers may run in parallel)."""
    return free_ports(1)[0]


def snippet_lines(recommended: bool = True) -> list[str]:
    """etc/slurm.conf.snippet's settings: its required (active) lines and, with
    `recommended`, the `#Key=Value` lines after its RECOMMENDED header uncommented, as a
    site whose slurm.conf sets none of those keys takes them."""
    lines, in_recommended = [], False
    for raw in SNIPPET.read_text().splitlines():
        line = raw.strip()
        if line.startswith("# =") and "RECOMMENDED" in line:
            in_recommended = True
        elif line and not line.startswith("#"):
            lines.append(line)
        elif recommended and in_recommended and re.fullmatch(r"#[A-Z]\w*=\S+", line):
            lines.append(line[1:])
    return lines


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def hold_the_gpu(cluster: LocalCluster) -> int:
    """Submit a job that takes the one-GPU cluster's GPU and wait until it runs, so the
    jobs submitted after it stay pending (the live priority tests read them in sprio)."""
    blocker = cluster.sbatch("--gres=gpu:1", "-J", "blocker", wrap="sleep 600")
    wait_for(
        lambda: cluster.run("squeue", "-h", "-j", str(blocker), "-o", "%T").strip() == "RUNNING",
        what="the blocking job to run",
    )
    return blocker


def old_store(path: Path, version: int, *rows: str) -> Store:
    """A store file as schema `version` left it, with `rows` (SQL) written by that
    version, opened by today's Store (which applies the later migrations)."""
    db = sqlite3.connect(path)
    db.executescript(";".join(MIGRATIONS[:version]) + f";PRAGMA user_version={version};")
    for sql in rows:
        db.execute(sql)
    db.commit()
    db.close()
    return Store(path)


@pytest.fixture
def cg() -> Iterator[SlurmLikeCgroups]:
    """A Slurm-like job cgroup tree with a freezer (v1 if mounted, else v2) for the agent's
    pause tests; skips on a kernel with neither. (test_cgroups.py has its own, per version.)"""
    mounts = read_mounts()
    if "freezer" not in mounts.v1 and mounts.v2 is None:
        pytest.skip("no cgroup freezer of either version on this kernel")
    c = (
        SlurmLikeCgroups(1, mounts.v1["freezer"])
        if "freezer" in mounts.v1
        else SlurmLikeCgroups(2, mounts.v2)
    )
    yield c
    c.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite the expected files under tests/golden/ from the code (review the diff).",
    )
