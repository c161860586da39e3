"""Contract tests: each backend against a real slurmctld (the CLI backend on 22.05 and
25.11, pyslurm on 25.11; see conftest.LIVE_BACKENDS), plus the CLI's parsing edge cases."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import LIVE_BACKENDS, cluster_options, live_client, session_cluster, wait_for

from slurm_ext.core.model import JobState
from slurm_ext.slurm.cli_backend import CliSlurmClient, job_from_squeue, node_from_sinfo
from slurm_ext.slurm.client import JobNotFound, SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.slurm.gres import job_gpus, parse_gpus
from slurm_ext.slurm.hostlist import compress_hostlist, expand_hostlist
from slurm_ext.testing.cluster import LocalCluster

# ---- parsing (no cluster) -----------------------------------------------------------


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("gres:gpu:4", (4, None)),
        ("gres/gpu:a100=2", (2, "a100")),
        ("gres/gpu=8", (8, None)),
        ("gpu:tesla:2(IDX:0-1)", (2, "tesla")),
        ("gpu:a100:4(S:0-1)", (4, "a100")),
        ("gres:gpu:a100:2,gres:shard:1", (2, "a100")),
        ("cpu=4,mem=8G,gres/gpu=2", (2, None)),
        ("cpu=4,gres/gpu=2,gres/gpu:a100=2", (2, "a100")),
        ("gpu:a100:2,gpu:v100:1", (3, "a100")),
        ("gpu:2(IDX:0,2)", (2, None)),
        ("gpu", (1, None)),
        ("gres:shard:2", (0, None)),
        ("", (0, None)),
        (None, (0, None)),
        ("(null)", (0, None)),
    ],
)
def test_parse_gpus_every_spelling(spec, expected):
    assert parse_gpus(spec) == expected


def test_parse_gpus_rejects_garbage_naming_it():
    with pytest.raises(ValueError, match="gpu:x:y:z"):
        parse_gpus("gpu:x:y:z")


def test_job_gpus_prefers_allocation_then_job_then_node_then_task():
    assert job_gpus("gres:gpu:3", "gres:gpu:4", None, 2, 1) == (3, 4, None)
    assert job_gpus(None, "gres:gpu:4", None, 2, 1) == (8, 4, None)
    assert job_gpus(None, None, "gres:gpu:1", 1, 6) == (6, 0, None)
    assert job_gpus(None, "gres:gpu:4", None, 2, 1, "cpu=2,gres/gpu=8") == (8, 4, None)


def test_hostlist_round_trip():
    names = expand_hostlist("node[1-3,7],gpu[01-02],login")
    assert names == ["node1", "node2", "node3", "node7", "gpu01", "gpu02", "login"]
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(names)
    with pytest.raises(ValueError, match="bad range"):
        expand_hostlist("node[1-x]")


def test_squeue_v0039_shapes_are_read():
    """Slurm >= 23.02 wraps numbers in {set, infinite, number} and states in lists."""
    rec = {
        "job_id": 42,
        "name": "train",
        "user_name": "alice",
        "partition": "gpu",
        "job_state": ["PENDING"],
        "state_reason": "Priority",
        "priority": {"set": True, "infinite": False, "number": 1234},
        "submit_time": {"set": True, "infinite": False, "number": 1700000000},
        "start_time": {"set": True, "infinite": False, "number": 0},
        "time_limit": {"set": True, "infinite": False, "number": 60},
        "node_count": {"set": True, "infinite": False, "number": 2},
        "cpus": {"set": True, "infinite": False, "number": 8},
        "tres_per_node": "gres/gpu:a100=4",
        "comment": "model=vgg16",
        "requeue": True,
    }
    job = job_from_squeue(rec)
    assert (job.job_id, job.state, job.priority, job.gpus, job.gpus_per_node) == (
        42,
        JobState.PENDING,
        1234,
        8,
        4,
    )
    assert job.gpu_type == "a100" and job.time_limit_s == 3600 and job.num_nodes == 2
    assert job.start_time is None and job.submit_time == 1700000000
    node = node_from_sinfo(
        {
            "name": "n1",
            "state": ["MIXED", "DRAIN"],
            "cpus": 64,
            "gres": "gpu:h100:8(S:0-1)",
            "gres_used": "gpu:h100:3(IDX:0-2)",
        }
    )
    assert (node.gpus, node.gpus_alloc, node.gpu_type, node.schedulable) == (8, 3, "h100", False)


def _fake_slurm_bin(tmp_path: Path, name: str, body: str) -> str:
    exe = tmp_path / name
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(tmp_path)


def test_malformed_json_is_a_clear_error(tmp_path):
    client = CliSlurmClient(bin_dir=_fake_slurm_bin(tmp_path, "squeue", "echo '{not json'"))
    with pytest.raises(SlurmError, match="squeue --json: malformed JSON"):
        client.jobs()


def test_unreadable_record_is_skipped_and_named(tmp_path, caplog):
    good = '{"job_id": 7, "job_state": "PENDING", "tres_per_node": "gres:gpu:1"}'
    body = f'echo \'{{"jobs": [{{"job_state": "RUNNING"}}, {good}, 5]}}\''
    client = CliSlurmClient(bin_dir=_fake_slurm_bin(tmp_path, "squeue", body))
    with caplog.at_level("WARNING", logger="slurm_ext.slurm"):
        jobs = client.jobs()
    assert [(j.job_id, j.gpus) for j in jobs] == [(7, 1)]
    assert "skipping unreadable job record None: 'job_id'" in caplog.text
    assert "skipping unreadable job record 5" in caplog.text


def test_slow_slurm_times_out_bounded(tmp_path):
    client = CliSlurmClient(bin_dir=_fake_slurm_bin(tmp_path, "sinfo", "sleep 30"), timeout=1)
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="no answer within 1s"):
        client.nodes()
    assert time.monotonic() - t0 < 5


# ---- live cluster ---------------------------------------------------------------------


@pytest.fixture
def clean_queue(live: tuple[LocalCluster, SlurmClient]) -> LocalCluster:
    """This module's live tests run once per (release, backend): the cluster of `live`."""
    return live[0]


@pytest.fixture
def client(live: tuple[LocalCluster, SlurmClient]) -> SlurmClient:
    return live[1]


def _job(client: SlurmClient, job_id: int):
    return next((j for j in client.jobs() if j.job_id == job_id), None)


@pytest.mark.slurm
def test_client_satisfies_protocol(client):
    assert isinstance(client, SlurmClient)


@pytest.mark.slurm
def test_nodes_read_back(client):
    nodes = {n.name: n for n in client.nodes()}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert all(n.gpus == 4 and n.cpus == 16 and n.schedulable for n in nodes.values())
    assert all("gpu" in n.partitions for n in nodes.values())


@pytest.mark.slurm
def test_submitted_jobs_read_back(clean_queue, client):
    c = clean_queue
    a = c.sbatch("--gres=gpu:2", "-c", "4", "--comment=model=resnet50", "-J", "alpha")
    b = c.sbatch("-N", "2", "--gres=gpu:4", "-J", "beta")
    big = c.sbatch("--gpus=64", "-J", "toobig", "--hold")  # can never run; stays pending
    wait_for(lambda: (j := _job(client, a)) and j.running, what="job a running")
    wait_for(lambda: (j := _job(client, b)) and j.running, what="job b running")
    ja, jb, jbig = _job(client, a), _job(client, b), _job(client, big)
    assert (ja.name, ja.gpus, ja.gpus_per_node, ja.cpus, ja.comment) == (
        "alpha",
        2,
        2,
        4,
        "model=resnet50",
    )
    assert ja.partition == "gpu" and ja.user == "root" and len(ja.nodes) == 1
    assert ja.start_time and ja.submit_time and ja.start_time >= ja.submit_time
    assert (jb.gpus, jb.num_nodes, len(jb.nodes)) == (8, 2, 2)
    assert jbig.pending and jbig.held and jbig.gpus == 64
    used = {n.name: n.gpus_alloc for n in client.nodes()}
    assert sum(used.values()) == 10


SPELLINGS = [
    ["--gpus=2"],
    ["--gres=gpu:2"],
    ["--gpus-per-node=2"],
    ["--gpus-per-task=1", "-n", "2"],
]


@pytest.mark.slurm
def test_every_gpu_spelling_reads_back_running_and_pending(clean_queue, client):
    """2 GPUs asked four ways, running and held; nodes' GPUs against sinfo's GresUsed."""
    c = clean_queue
    running = [c.sbatch(*args, "-J", "run") for args in SPELLINGS]
    held = [c.sbatch(*args, "--hold", "-J", "held") for args in SPELLINGS]
    wait_for(
        lambda: all((j := _job(client, r)) and j.running for r in running), what="jobs running"
    )
    jobs = {j.job_id: j for j in client.jobs()}
    assert [jobs[r].gpus for r in running] == [2, 2, 2, 2]
    assert [jobs[h].gpus for h in held] == [2, 2, 2, 2]
    out = c.run("sinfo", "-N", "-h", "-O", "NodeList:|,GresUsed:|")
    slurm_says = {p[0]: parse_gpus(p[1])[0] for p in (ln.split("|") for ln in out.splitlines())}
    assert {n.name: n.gpus_alloc for n in client.nodes()} == slurm_says
    assert sum(slurm_says.values()) == 8


@pytest.mark.slurm
def test_priority_changes_the_start_order(clean_queue, client):
    """Pending whole-cluster jobs start one at a time in the priority order we set."""
    c = clean_queue
    blocker = c.sbatch("-N", "4", "--gres=gpu:4", "-J", "blocker")
    wait_for(lambda: (j := _job(client, blocker)) and j.running, what="blocker running")
    waiting = [c.sbatch("-N", "4", "--gres=gpu:4", "-J", f"w{i}") for i in range(3)]
    # reverse FIFO: last submitted first
    for rank, job_id in enumerate(reversed(waiting)):
        client.set_priority(job_id, 1000 - rank * 100)
    prios = {j.job_id: j.priority for j in client.jobs() if j.job_id in waiting}
    assert prios == {waiting[2]: 1000, waiting[1]: 900, waiting[0]: 800}
    started = []
    current = blocker
    for _ in range(3):
        c.run("scancel", str(current))
        current = wait_for(
            lambda: next(
                (
                    j.job_id
                    for j in client.jobs()
                    if j.running and j.job_id in waiting and j.job_id not in started
                ),
                None,
            ),
            timeout=30,
            what="next job to start",
        )
        started.append(current)
    assert started == list(reversed(waiting))


@pytest.mark.slurm
def test_site_factor_and_nice_are_written(clean_queue, client):
    c = clean_queue
    blocker = c.sbatch("-N", "4", "--gres=gpu:4", "-J", "blocker")
    wait_for(lambda: (j := _job(client, blocker)) and j.running, what="blocker running")
    job_id = c.sbatch("--gres=gpu:1", "-J", "sf")  # pending on resources, eligible
    client.set_site_factor(job_id, 5000)
    client.set_nice(job_id, 100)
    out = c.run("scontrol", "show", "job", str(job_id))
    assert "Nice=100" in out
    sprio = c.run("sprio", "-h", "-j", str(job_id), "-o", "%i %S")
    assert sprio.split() == [str(job_id), "5000"]
    # every multifactor weight is 0 in the harness, so priority = site factor - nice
    job = _job(client, job_id)
    assert (job.priority, job.site_factor, job.nice) == (5000 - 100, 5000, 100)
    client.set_site_factor(job_id, 0)  # zeroes too (pyslurm alone would drop them)
    client.set_nice(job_id, 0)
    assert sprio_site(c, job_id) == 0 and "Nice=0" in c.run("scontrol", "show", "job", str(job_id))
    job = _job(client, job_id)
    assert (job.site_factor, job.nice) == (0, 0)


def sprio_site(c: LocalCluster, job_id: int) -> int:
    return int(c.run("sprio", "-h", "-j", str(job_id), "-o", "%S").split()[0])


@pytest.mark.slurm
def test_hold_and_release(clean_queue, client):
    c = clean_queue
    job_id = c.sbatch("--gres=gpu:1", "--begin=now+3600", "-J", "h")
    client.hold(job_id)
    j = _job(client, job_id)
    assert j.held and j.priority == 0
    client.release(job_id)
    j = _job(client, job_id)
    assert not j.held and j.priority > 0


@pytest.mark.slurm
def test_required_nodes_steer_the_job(clean_queue, client):
    c = clean_queue
    job_id = c.sbatch("--gres=gpu:1", "--hold", "-J", "pin")
    client.set_placement(job_id, required_nodes=["node1"], num_nodes=1)
    assert _job(client, job_id).required_nodes == ("node1",)
    client.set_placement(job_id, required_nodes=[])  # clears it
    assert _job(client, job_id).required_nodes == ()
    client.set_placement(job_id, required_nodes=["node3"], num_nodes=1)
    assert _job(client, job_id).required_nodes == ("node3",)
    client.release(job_id)
    j = wait_for(lambda: (j := _job(client, job_id)) and j.running and j, what="pinned job running")
    assert j.nodes == ("node3",)
    other = c.sbatch("--gres=gpu:1", "--hold", "-J", "excl")
    client.set_placement(other, excluded_nodes=["node1", "node2", "node3"])
    client.release(other)
    j = wait_for(
        lambda: (j := _job(client, other)) and j.running and j, what="excluded job running"
    )
    assert j.nodes == ("node4",)


@pytest.mark.slurm
def test_suspend_resume_requeue(clean_queue, client):
    c = clean_queue
    job_id = c.sbatch("--gres=gpu:1", "-J", "s")
    wait_for(lambda: (j := _job(client, job_id)) and j.running, what="job running")
    client.suspend(job_id)
    assert _job(client, job_id).state == JobState.SUSPENDED
    client.resume(job_id)
    assert _job(client, job_id).state == JobState.RUNNING
    client.requeue(job_id)
    out = wait_for(
        lambda: (o := c.run("scontrol", "show", "job", str(job_id))) and "Restarts=1" in o and o,
        what="requeued job",
    )
    assert "Restarts=1" in out


@pytest.mark.slurm
def test_unknown_job_is_job_not_found(client):
    with pytest.raises(JobNotFound, match="9999999"):
        client.set_priority(9999999, 10)
    for write in (client.hold, client.release, client.suspend, client.resume, client.requeue):
        with pytest.raises(JobNotFound):
            write(9999999)


@pytest.mark.slurm
@pytest.mark.parametrize("case", LIVE_BACKENDS)
def test_controller_down_raises_unavailable_quickly(request, tmp_path, case):
    version, backend = case.split("-")
    if backend == "pyslurm":
        # pyslurm reads one slurm.conf per process: stop and restart the session cluster's
        c = session_cluster(request, version)
        own = None
    else:
        own = c = LocalCluster(
            nodes=1, gpus_per_node=1, root=tmp_path / "c", **cluster_options(version)
        ).start()
    try:
        client = live_client(c, backend)
        assert len(client.nodes()) == c.nodes
        c.stop_slurmctld()
        t0 = time.monotonic()
        with pytest.raises(SlurmUnavailable) as info:
            client.jobs()
        elapsed = time.monotonic() - t0
        assert ("squeue --json" if backend == "cli" else "pyslurm.Jobs.load()") in str(info.value)
        assert elapsed < 25, elapsed
        c.start_slurmctld()
        wait_for(lambda: _safe_nodes(client), timeout=30, what="controller back")
    finally:
        if own is not None:
            own.cleanup()


def _safe_nodes(client):
    try:
        return client.nodes()
    except SlurmError:
        return None


def test_recorded_squeue_22_05_record_maps():
    """A record captured from Debian 12's squeue --json (22.05.8)."""
    path = Path(__file__).parent / "data" / "squeue_22.05_running_2node.json"
    rec = json.loads(path.read_text())
    job = job_from_squeue(rec)
    assert (job.job_id, job.state, job.gpus, job.gpus_per_node, job.num_nodes) == (
        2,
        JobState.RUNNING,
        8,
        4,
        2,
    )
    assert job.nodes == ("node2", "node3") and job.requeue


@pytest.mark.slurm
def test_batched_site_factors_are_written_and_failures_named(clean_queue, client):
    c = clean_queue
    blocker = c.sbatch("-N", "4", "--gres=gpu:4", "-J", "blocker")
    # running first, so none of the 1-GPU jobs can start (sprio lists pending jobs only)
    wait_for(lambda: (j := _job(client, blocker)) and j.running, what="blocker running")
    ids = [c.sbatch("--gres=gpu:1", "-J", f"b{i}") for i in range(6)]  # pending, eligible
    gone = 999_999  # never existed: one failure in the middle, one at the end
    values = {ids[0]: 101, ids[1]: 102, gone: 7, ids[2]: 103}
    values.update({j: 200 + k for k, j in enumerate(ids[3:])})
    values[gone + 1] = 8
    failed = client.set_site_factors(values)
    assert sorted(failed) == [gone, gone + 1]
    assert all(isinstance(e, JobNotFound) for e in failed.values())
    sprio = c.run("sprio", "-h", "-o", "%i %S")
    seen = {int(i): int(s) for i, s in (line.split() for line in sprio.splitlines())}
    assert {j: seen[j] for j in ids} == {j: v for j, v in values.items() if j in ids}
    # a batch without failures goes through in one scontrol
    assert client.set_priorities({ids[0]: 5000, ids[1]: 4000}) == {}
    assert _job(client, ids[0]).priority == 5000 and _job(client, ids[1]).priority == 4000
