"""The service against a real slurmctld: start order, restart safety, outages, config errors.

The tests on a live cluster run once per (Slurm release, backend) of conftest.LIVE_BACKENDS:
the service is a subprocess configured with that backend, with the release's commands
first on PATH.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import cluster_options, free_port, wait_for

from slurm_ext.core.fields import TUNING, place
from slurm_ext.core.reports import SIGNATURE_HEADER, JobReport, encode_reports, sign
from slurm_ext.policy import PolicyConfig
from slurm_ext.testing.cluster import LocalCluster

SLURM_EXT = [sys.executable, "-m", "slurm_ext.cli"]
pytestmark = pytest.mark.slurm
_ENV: dict[str, str] = {}  # the environment of the service and CLI subprocesses


@pytest.fixture
def clean_queue(live, request) -> LocalCluster:
    """The cluster of `live` (once per release and backend), its commands first on PATH
    for the service subprocesses, and `backend` set for write_config."""
    cluster, client = live
    _use(cluster, "pyslurm" if type(client).__name__ == "PySlurmClient" else "cli")
    request.addfinalizer(_ENV.clear)
    return cluster


def _use(cluster: LocalCluster, backend: str) -> None:
    _ENV.clear()
    _ENV.update(os.environ)
    if cluster.bin_dir:
        _ENV["PATH"] = f"{cluster.bin_dir}:{_ENV.get('PATH', '')}"
    _ENV["SLURM_EXT_TEST_BACKEND"] = backend


def write_config(path: Path, cluster: LocalCluster, **extra: object) -> Path:
    top: dict[str, object] = {
        "interval_s": 0.5,
        "store": f'"{path.parent / "service.db"}"',
        "port": 0,
    }
    # GPU-second queue limits (Tiresias' rule): the tests time their jobs by GPU-seconds
    policy: dict[str, object] = {
        "queue_thresholds_gpu_s": "[10.0]",
        "queue_gpu_exponent": "0.0",
        "min_run_s": "0.0",
    }
    for key, value in extra.items():
        if key.startswith("policy_"):
            policy[key[7:]] = value
        else:
            top[key] = value
    lines = [f"{k} = {v}" for k, v in top.items()]
    backend = _ENV.get("SLURM_EXT_TEST_BACKEND", "cli")
    lines += [
        "[slurm]",
        f'backend = "{backend}"',
        f'slurm_conf = "{cluster.conf_path}"',
        "timeout_s = 10",
    ]
    tuned = {f.name for f in dataclasses.fields(PolicyConfig) if place(f) == TUNING}
    lines += ["[policy]"] + [f"{k} = {v}" for k, v in policy.items() if k not in tuned]
    lines += ["[policy.tuning]"] + [f"{k} = {v}" for k, v in policy.items() if k in tuned]
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [*SLURM_EXT, *args], capture_output=True, text=True, timeout=60, env=_ENV or None
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"slurm-ext {' '.join(args)} -> {res.returncode}\n{res.stdout}\n{res.stderr}"
        )
    return res


def queue_jobs(config: Path) -> list[dict]:
    """`slurm-ext queue --json`'s jobs; none until the service's first pass has created
    its store (on a loaded machine a job can run before that), any other failure raises."""
    res = cli("queue", "--json", "--config", str(config), check=False)
    if res.returncode != 0 and "store not found" in res.stderr:
        return []
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return json.loads(res.stdout)["jobs"]


def start_service(config: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*SLURM_EXT, "serve", "--config", str(config)],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=_ENV or None,
    )


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(15)


def squeue(cluster: LocalCluster) -> dict[int, tuple[str, str]]:
    out = cluster.run("squeue", "-h", "-o", "%i %T %j")
    return {int(i): (s, n) for i, s, n in (line.split() for line in out.splitlines())}


def _reasons(cluster: LocalCluster, jobs: list[int]) -> list[str]:
    out = cluster.run("squeue", "-h", "-j", ",".join(map(str, jobs)), "-o", "%r")
    return out.split()


def run_backlog_scenario(
    cluster: LocalCluster, service: subprocess.Popen | None, config: Path | None
) -> list[str]:
    """Long jobs run and gain GPU service, get requeued behind a blocker, short jobs
    arrive; when the blocker ends, which jobs does slurmctld start first?"""
    c = cluster
    longs = [c.sbatch("-N1", "--gres=gpu:4", "-J", f"long{i}") for i in range(4)]
    wait_for(
        lambda: all(squeue(c).get(j, ("",))[0] == "RUNNING" for j in longs),
        what="long jobs running",
    )
    time.sleep(4)  # 4 GPUs x 4 s = 16 GPU-s > the 10 GPU-s queue threshold
    if service is not None:
        # the service must have seen them run past the threshold (passes are slower on a
        # loaded machine): every long job in queue 1 before they are requeued
        def demoted() -> bool:
            rows = queue_jobs(config)
            return all(r["queue"] == 1 for r in rows if r["job_id"] in longs) and len(rows) >= 4

        wait_for(demoted, timeout=30, what="service saw the long jobs pass 10 GPU-s")
    for j in longs:
        c.run("scontrol", "requeuehold", str(j))
    blocker = c.sbatch("-N4", "--gres=gpu:4", "-J", "blocker")
    wait_for(lambda: squeue(c).get(blocker, ("",))[0] == "RUNNING", what="blocker running")
    for j in longs:
        c.run("scontrol", "release", str(j))
    # requeued jobs wait cred_expire + 1 s (5 + 1 in the harness) before they are eligible;
    # they must be eligible, and strictly older than the shorts, before the shorts arrive
    wait_for(
        lambda: all(r in ("Priority", "Resources") for r in _reasons(c, longs)),
        timeout=30,
        what="requeued long jobs eligible",
    )
    time.sleep(1.1)
    for i in range(4):
        c.sbatch("-N1", "--gres=gpu:4", "-J", f"short{i}")
    if service is not None:
        # wait until the service has ranked every waiting job and written its value
        def written() -> bool:
            rows = queue_jobs(config)
            vals = {r["job_id"]: r["value_set"] for r in rows if r["state"] == "PENDING"}
            return len(vals) == 8 and all(v is not None for v in vals.values())

        wait_for(written, timeout=30, what="service wrote values for all waiting jobs")
    c.run("scancel", str(blocker))
    running = wait_for(
        lambda: (
            (names := [n for s, n in squeue(c).values() if s == "RUNNING" and n != "blocker"])
            and len(names) == 4
            and names
        ),
        timeout=30,
        what="four jobs started after the blocker",
    )
    return sorted(running)


def test_short_jobs_overtake_the_backlog_only_with_the_service(clean_queue, tmp_path):
    c = clean_queue
    # service off: slurmctld alone starts the waiting jobs FIFO (the long ones, submitted first)
    assert run_backlog_scenario(c, None, None) == ["long0", "long1", "long2", "long3"]
    cli_cancel = c.run("scancel", "--full", f"--partition={c.partition}", check=False)
    assert cli_cancel == ""
    wait_for(lambda: not squeue(c), what="queue empty")
    # service on: the long jobs gained 16 GPU-s each and sit in queue 1; shorts go first
    config = write_config(tmp_path / "service.toml", c)
    proc = start_service(config, tmp_path / "service.log")
    try:
        assert run_backlog_scenario(c, proc, config) == ["short0", "short1", "short2", "short3"]
        sprio = c.run("sprio", "-h", "-o", "%i %Y %S %A %F %Q")
        rows = [line.split() for line in sprio.splitlines()]
        assert rows and all(len(r) == 6 for r in rows)  # multifactor components still shown
        assert all(int(r[1]) >= int(r[2]) > 0 for r in rows)  # priority includes our site factor
    finally:
        stop(proc)
    log = (tmp_path / "service.log").read_text()
    assert "pass:" in log and "jobs ranked" in log
    assert f"Slurm backend: {_ENV['SLURM_EXT_TEST_BACKEND']} (asked for explicitly" in log


def test_restart_resumes_from_the_store_without_rewrites(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(tmp_path / "service.toml", c)
    runner = c.sbatch("--gres=gpu:4", "-J", "runner")
    c.sbatch("-N4", "--gres=gpu:4", "-J", "waiting-big")
    for i in range(3):
        c.sbatch("--gres=gpu:4", "-N4", "-J", f"w{i}")
    proc = start_service(config, tmp_path / "service.log")
    try:
        wait_for(lambda: "writes" in (tmp_path / "service.log").read_text(), what="first pass")
        time.sleep(2)
    finally:
        stop(proc, signal.SIGKILL)  # no clean shutdown
    before = json.loads(cli("explain", str(runner), "--json", "--config", str(config)).stdout)
    assert before["attained_gpu_s"] > 0
    queue_before = {
        r["job_id"]: r["value_set"]
        for r in json.loads(cli("queue", "--json", "--config", str(config)).stdout)["jobs"]
    }
    res = cli("serve", "--once", "--config", str(config))
    assert "0 writes" in res.stderr, res.stderr
    after = json.loads(cli("explain", str(runner), "--json", "--config", str(config)).stdout)
    assert after["attained_gpu_s"] >= before["attained_gpu_s"]  # no lost service
    queue_after = {
        r["job_id"]: r["value_set"]
        for r in json.loads(cli("queue", "--json", "--config", str(config)).stdout)["jobs"]
    }
    assert queue_after == queue_before


def test_dry_run_writes_nothing_and_pins_holds_are_untouched(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(tmp_path / "service.toml", c)
    blocker = c.sbatch("-N4", "--gres=gpu:4", "-J", "blocker")
    # every GPU taken before the others arrive: were the blocker still pending (nodes
    # still cleaning up after the last test), the 1-GPU jobs could start and leave sprio
    wait_for(lambda: squeue(c).get(blocker, ("",))[0] == "RUNNING", what="blocker running")
    jobs = [c.sbatch("--gres=gpu:1", "-J", f"p{i}") for i in range(3)]
    held = c.sbatch("--gres=gpu:1", "--hold", "-J", "held")
    res = cli("serve", "--once", "--dry-run", "--config", str(config))
    assert "dry run, not written" in res.stderr
    # no slurmdbd here: sacct says so (CLI backend), pyslurm.db cannot connect to it
    said = (
        "accounting storage is disabled" if _ENV["SLURM_EXT_TEST_BACKEND"] == "cli" else "slurmdbd"
    )
    assert "no accounting history (" in res.stderr and said in res.stderr, res.stderr
    assert "SITE" in c.run("sprio", "-l")
    assert all(r.split()[1] == "0" for r in c.run("sprio", "-h", "-o", "%i %S").splitlines())
    cli("pin", str(jobs[0]), "--config", str(config))
    cli("serve", "--once", "--config", str(config))
    site = dict(r.split() for r in c.run("sprio", "-h", "-o", "%i %S").splitlines())
    assert site[str(jobs[0])] == "0"  # pinned: untouched
    assert int(site[str(jobs[1])]) > int(site[str(jobs[2])]) > 0  # FIFO among equals
    assert "Priority=0" in c.run("scontrol", "show", "job", str(held))  # still held
    text = cli("explain", str(jobs[0]), "--config", str(config)).stdout
    assert "pinned by an admin" in text
    table = cli("queue", "--config", str(config)).stdout
    assert table.splitlines()[0].split()[:3] == ["RANK", "JOBID", "USER"]
    assert str(jobs[1]) in table and "last pass" in table
    cli("unpin", str(jobs[0]), "--config", str(config))
    cli("serve", "--once", "--config", str(config))
    site = dict(r.split() for r in c.run("sprio", "-h", "-o", "%i %S").splitlines())
    assert int(site[str(jobs[0])]) > int(site[str(jobs[1])])  # managed again, FIFO first
    nodes = json.loads(cli("nodes", "--json", "--config", str(config)).stdout)
    assert len(nodes["nodes"]) == 4 and sum(n["gpus_used"] for n in nodes["nodes"]) == 16
    assert nodes["fragmentation"] == 0.0


@pytest.mark.parametrize("case", ["22.05-cli", "25.11-pyslurm"])
def test_controller_outage_backs_off_and_catches_up(tmp_path, case, request):
    """slurmctld stopped for 30 s while the service runs (interval 0.5 s, back-off
    capped at 4 s): it logs, backs off, stays up, keeps its state and catches up.
    (pyslurm's errors map to SlurmUnavailable by errno, the CLI's by message.)"""
    version, backend = case.split("-")
    options = cluster_options(version)
    if backend == "pyslurm" and importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (scripts/install-slurm2511.sh builds it)")
    request.addfinalizer(_ENV.clear)
    with LocalCluster(nodes=1, gpus_per_node=2, root=tmp_path / "c", **options) as c:
        _use(c, backend)
        config = write_config(tmp_path / "service.toml", c, backoff_max_s=4.0)
        log = tmp_path / "service.log"
        running = c.sbatch("--gres=gpu:1", "-J", "r")
        wait_for(lambda: squeue(c).get(running, ("",))[0] == "RUNNING", what="job running")
        t_start = time.time()
        proc = start_service(config, log)
        try:
            wait_for(lambda: "jobs ranked" in log.read_text(), what="first pass")
            c.stop_slurmctld()
            down_at = time.monotonic()
            wait_for(lambda: "pass failed" in log.read_text(), timeout=40, what="failure logged")
            time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
            assert proc.poll() is None  # still alive after 30 s without slurmctld
            failures = log.read_text().count("pass failed")
            # back-off 1, 2, 4, 4, ... s: about 9 tries in 30 s, not 60
            assert 4 <= failures <= 14, failures
            c.start_slurmctld()
            wait_for(lambda: "recovered after" in log.read_text(), timeout=60, what="catch-up")
            outage_and_all = time.time() - t_start
        finally:
            stop(proc)
        info = json.loads(cli("explain", str(running), "--json", "--config", str(config)).stdout)
        assert info["slurm_state"] == "RUNNING", (info, c.run("squeue"), log.read_text()[-3000:])
        # counted from Slurm's StartTime, so the outage lost nothing (1 GPU)
        assert info["attained_gpu_s"] >= outage_and_all - 2


def test_bad_config_exits_2_naming_key_and_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('mode = "absolute"\n')
    res = cli("serve", "--config", str(bad), check=False)
    assert res.returncode == 2 and f"{bad}: mode: must be one of" in res.stderr
    bad.write_text("[policy.tuning]\nstarvation_factor = -1.0\n")
    res = cli("queue", "--config", str(bad), check=False)
    assert res.returncode == 2 and "policy" in res.stderr and "starvation_factor" in res.stderr
    res = cli("serve", "--config", str(tmp_path / "nope.toml"), check=False)
    assert res.returncode == 2 and "file not found" in res.stderr


# a job id no test submits: a real job 77 on another node (the session cluster reaches it
# in a full run) makes the report's node check refuse it, as it should
MISSING_JOB = 4_000_000_077


def test_metrics_and_signed_reports(clean_queue, tmp_path):
    c = clean_queue
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    port = free_port()
    config = write_config(tmp_path / "service.toml", c, port=port, report_secret_file=f'"{secret}"')
    proc = start_service(config, tmp_path / "service.log")
    try:
        base = f"http://127.0.0.1:{port}"
        text = wait_for(lambda: _get(base + "/metrics"), what="metrics endpoint")
        wait_for(
            lambda: "slurm_ext_jobs_ranked" in (_get(base + "/metrics") or ""), what="pass metrics"
        )
        assert "slurm_ext_pass_duration_seconds_count" in _get(base + "/metrics")
        rep = JobReport(
            node="node1",
            job_id=MISSING_JOB,
            gpu_seconds=10.0,
            gpu_util_mean=0.5,
            gpu_util_peak=0.9,
            gpu_mem_peak_bytes=1 << 30,
            cpu_cores_alloc=4,
            cpu_cores_used=2.5,
            gpu_energy_j=100.0,
            cpu_energy_j=20.0,
            gpu_uuids=("GPU-x",),
            gpu_type="sim",
            samples=3,
            period_start=1.0,
            period_end=11.0,
        )
        body = encode_reports("node1", [rep])
        assert _post(base + "/v1/reports", body, "deadbeef") == 401
        assert _post(base + "/v1/reports", body, sign(body, secret.read_bytes().strip())) == 200
        assert "slurm_ext_writes_total" in text
        final = _get(base + "/metrics")
        assert 'slurm_ext_reports_refused_total{reason="signature"} 1.0' in final
        assert "slurm_ext_reports_received_total 1.0" in final
    finally:
        stop(proc)
    from slurm_ext.store.db import Store

    stored = Store(tmp_path / "service.db", readonly=True).reports(MISSING_JOB)
    assert len(stored) == 1 and stored[0].gpu_energy_j == 100.0


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def _post(url: str, body: bytes, signature: str) -> int:
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={SIGNATURE_HEADER: signature, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _show(cluster: LocalCluster, job_id: int) -> str:
    return cluster.run("scontrol", "show", "job", str(job_id))


def test_placement_hint_pins_the_best_fit_node(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(
        tmp_path / "service.toml", c, placement="true", placement_mode='"consolidate"'
    )
    c.sbatch("-w", "node1", "--gres=gpu:3", "-J", "a")
    c.sbatch("-w", "node2", "--gres=gpu:2", "-J", "b")
    c.sbatch("-w", "node3", "--gres=gpu:4", "-J", "c")
    wait_for(
        lambda: sum(1 for s, _ in squeue(c).values() if s == "RUNNING") == 3, what="fillers running"
    )
    job = c.sbatch("--gpus=2", "--begin=now+8", "-J", "p")  # pending but not held
    cli("serve", "--once", "--config", str(config))
    shown = _show(c, job)  # exactly 2 free on node2: best fit, one node; every other excluded
    assert "ReqNodeList=(null) ExcNodeList=node[1,3-4]\n" in shown, shown
    info = json.loads(cli("explain", str(job), "--json", "--config", str(config)).stdout)
    assert info["placement"] == ["node2"]
    wait_for(lambda: "JobState=RUNNING" in _show(c, job), timeout=30, what="placed job running")
    assert "NodeList=node2\n" in _show(c, job)


def test_requeue_preemption_only_touches_opted_in_jobs(clean_queue, tmp_path):
    c = clean_queue
    config = write_config(
        tmp_path / "service.toml", c, preemption='"requeue"', max_requeues_per_pass=1
    )
    opted = [
        c.sbatch("-N1", "--gres=gpu:4", "--requeue", "--comment=checkpoint=1", "-J", f"ck{i}")
        for i in range(2)
    ]
    plain = [c.sbatch("-N1", "--gres=gpu:4", "--requeue", "-J", f"plain{i}") for i in range(2)]
    wait_for(
        lambda: all(squeue(c)[j][0] == "RUNNING" for j in opted + plain), what="old jobs running"
    )
    cli("serve", "--once", "--config", str(config))  # records their start
    time.sleep(4)  # 16 GPU-s each: queue 1
    new = c.sbatch("-N1", "--gres=gpu:4", "-J", "new")
    # preemption_cost (default on): the new job has not waited as long as a requeue
    # would lose (the victims' stints + 30 s restart, checkpoint every 900 s): nobody goes
    res = cli("serve", "--once", "--config", str(config))
    assert "0 requeued" in res.stderr, res.stderr
    config = write_config(
        tmp_path / "service.toml",
        c,
        preemption='"requeue"',
        max_requeues_per_pass=1,
        policy_preemption_cost="false",
    )
    res = cli("serve", "--once", "--config", str(config))
    assert "1 requeued" in res.stderr, res.stderr
    restarts = {j: "Restarts=1" in _show(c, j) for j in opted + plain}
    assert sum(restarts[j] for j in opted) == 1 and not any(restarts[j] for j in plain)
    wait_for(
        lambda: squeue(c)[new][0] == "RUNNING",
        timeout=30,
        what="waiting job started in the freed GPUs",
    )


def test_explain_names_the_kind_group_of_a_never_run_job(clean_queue, tmp_path):
    """Conditioned Gittins on a real slurmctld: the store remembers that this user's
    "train" jobs finished fast and "sim" jobs slowly; a later-submitted train job outranks
    an earlier sim job, and explain says which group its index came from."""
    import getpass

    from slurm_ext.store.db import Store

    c = clean_queue
    me = getpass.getuser()
    # names no other test uses: an ended job of the same name that Slurm still lists
    # (MinJobAge) would be folded into the history and change the sample counts
    tag = uuid.uuid4().hex[:8]
    train_name, sim_name = f"train-{tag}", f"sim-{tag}"
    store = Store(tmp_path / "service.db")
    rows = [(900 + i, 60.0, 60.0, 1000.0 + i, me, train_name, "", 3600.0) for i in range(3)]
    rows += [(910 + i, 9000.0, 9000.0, 1000.0 + i, me, sim_name, "", 86400.0) for i in range(3)]
    store.save_jobs([], rows)
    store.close()
    config = write_config(
        tmp_path / "service.toml",
        c,
        history_source='"store"',
        policy_gittins_kind_min_samples="3",
        policy_gittins_classes='"pooled"',
    )
    c.sbatch("-N4", "--gres=gpu:4", "-J", "blocker")
    sim = c.sbatch("--gres=gpu:1", "-J", sim_name)
    train = c.sbatch("--gres=gpu:1", "-J", train_name)
    cli("serve", "--once", "--config", str(config))
    text = cli("explain", str(train), "--config", str(config)).stdout
    assert f"from user={me},name={train_name} (3 completed jobs)" in text, text
    info = json.loads(cli("explain", str(sim), "--json", "--config", str(config)).stdout)
    assert f"from user={me},name={sim_name} (3 completed jobs)" in info["policy_reason"]
    ranks = {r["job_id"]: r["rank"] for r in json.loads(
        cli("queue", "--json", "--config", str(config)).stdout)["jobs"]}  # fmt: skip
    assert ranks[train] < ranks[sim]
