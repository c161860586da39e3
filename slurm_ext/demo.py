"""`make demo`: a real local Slurm cluster, the priority service and a node agent, end to end.

Starts 4 slurmd x 4 (fake-device) GPUs and one slurmctld, the service (`slurm-ext serve`)
against them, and a node agent for node1 (`slurm-ext-agent run`, its own process, with
a generated agent.toml) whose simulated GPUs follow the real allocation (there is no GPU
here), submits a small mixed DL workload, and prints the
queue as the suite sees it while it runs. Everything is stopped by PID at the end.

    python -m slurm_ext.demo [--seconds 60] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_ext.slurm import CliSlurmClient
from slurm_ext.store.db import Store
from slurm_ext.testing.cluster import LocalCluster

WORKLOAD = [
    # (name, sbatch args, seconds) - a mix of long multi-GPU training and short jobs
    # the first and third checkpoint and may be requeued (--requeue + checkpoint=1)
    ("vgg16-long", ["-N1", "--gres=gpu:4", "--requeue", "--comment=model=vgg16 checkpoint=1"], 900),
    ("resnet50-long", ["-N1", "--gres=gpu:4", "--comment=model=resnet50"], 900),
    ("gpt-8gpu", ["--gpus=8", "--requeue", "--comment=model=gpt2 checkpoint=1"], 600),
    ("bert-2gpu", ["--gpus=2", "--comment=model=bert"], 120),
    ("inception-2gpu", ["--gpus=2", "--comment=model=inception3"], 120),
    *[(f"sweep-{i}", ["--gres=gpu:1", "--comment=model=resnet18"], 20 + 10 * i) for i in range(6)],
    ("vgg19-4gpu", ["-N1", "--gres=gpu:4", "--comment=model=vgg19"], 300),
]
DEMO_GPUS = 4  # per node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _say(msg: str) -> None:
    print(f"\n=== {msg}", flush=True)


def _slurm_ext(*args: str, config: Path) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return res.stdout + (res.stderr if res.returncode else "")


def _drive_gpus(
    processes_file: Path, client: CliSlurmClient, node: str, stop: threading.Event
) -> None:
    """Place the processes of jobs Slurm runs on `node` onto the agent's simulated GPUs,
    through the placement file its `gpu.simulated_processes_file` names."""
    while not stop.is_set():
        try:
            jobs = [j for j in client.jobs(states=("RUNNING",)) if node in j.nodes]
        except Exception:  # the demo goes on if Slurm blinks
            jobs = []
        placed = []
        slot = 0
        for job in sorted(jobs, key=lambda j: j.job_id):
            per_node = job.gpus_per_node or max(1, job.gpus // max(1, len(job.nodes)))
            for pid in _pids_of_job(job.job_id):
                placed += [
                    {"pid": pid, "gpu": slot + k, "memory_bytes": (20 + job.job_id % 40) << 30,
                     "sm_util": 0.85}
                    for k in range(per_node)
                    if slot + k < DEMO_GPUS
                ]  # fmt: skip
            slot += per_node
        tmp = processes_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(placed))
        tmp.replace(processes_file)  # the agent reads it whole or not at all
        stop.wait(2.0)


def _pids_of_job(job_id: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}\0".encode() in env:
            pids.append(int(entry))
    return pids


def agent_toml(
    root: Path, slurm_conf: Path, port: int, secret: Path, metrics_port: int, processes: Path
) -> str:
    """The demo agent's agent.toml, as an admin would write it for node1 (with simulated
    GPUs placed by `processes`). Its Slurm queries (job classes, thaw checks) go to the
    demo cluster: no SLURM_CONF in the environment points there."""
    return (
        f'node_name = "node1"\ninterval_s = 2.0\nstate_file = "{root / "agent-state.json"}"\n'
        f'[gpu]\nbackend = "simulated"\nsimulated_count = {DEMO_GPUS}\n'
        f'simulated_processes_file = "{processes}"\n'
        f'[exporter]\nlisten = "127.0.0.1"\nport = {metrics_port}\n'
        f'[report]\nenabled = true\nservice_url = "http://127.0.0.1:{port}"\n'
        f'secret_file = "{secret}"\ninterval_s = 6.0\nspool_dir = "{root / "spool"}"\n'
        "backoff_max_s = 10.0\n"
        f'[jobs]\nslurm_conf = "{slurm_conf}"\ntimeout_s = 20.0\n'
    )


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    """A daemon of the demo in its own session, logging to `log`; stopped by its PID."""
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def service_toml(root: Path, slurm_conf: Path, port: int, secret: Path) -> str:
    """The demo service's service.toml: the demo cluster, placement and requeue on, and
    queue limits scaled to a one-minute demo: demoted after 20 s and 200 s of run
    (x GPUs in GPU-seconds: queue_gpu_exponent 1)."""
    return (
        f'interval_s = 2.0\nstore = "{root}/service.db"\nport = {port}\n'
        f'report_secret_file = "{secret}"\nplacement = true\npreemption = "requeue"\n'
        f'[slurm]\nbackend = "cli"\nslurm_conf = "{slurm_conf}"\n'
        '[policy]\npolicy = "gittins"\nmin_run_s = 30.0\n'
        "[policy.tuning]\nqueue_thresholds_gpu_s = [20.0, 200.0]\nstarvation_factor = 4.0\n"
    )


def _submit_workload(cluster: LocalCluster) -> dict[str, int]:
    """Submit WORKLOAD; its Slurm job ids by name."""
    _say("submitting a mixed DL workload")
    ids = {}
    for name, sb_args, secs in WORKLOAD:
        ids[name] = cluster.sbatch("-J", name, *sb_args, wrap=f"sleep {secs}")
        print(f"  {ids[name]:>3}  {name:<16} {' '.join(sb_args)}  (runs {secs}s)")
        time.sleep(0.3)
    return ids


def _watch(config: Path, seconds: float, keep: bool) -> None:
    """Print the queue as the suite sees it every 10 s, for `seconds` (or until Ctrl-C)."""
    deadline = time.monotonic() + seconds
    shown = 0
    while keep or time.monotonic() < deadline:
        time.sleep(10 if shown else 6)
        shown += 1
        _say(f"slurm-ext queue  (t+{shown * 10 - 4}s)")
        print(_slurm_ext("queue", config=config))


def _show_results(
    cluster: LocalCluster, client: CliSlurmClient, config: Path, store: Path, gpt_job: int
) -> None:
    """The nodes, the 8-GPU job explained, Slurm's sprio, and the agent's stored reports."""
    _say("slurm-ext nodes")
    print(_slurm_ext("nodes", config=config))
    _say(f"slurm-ext explain {gpt_job}  (the 8-GPU job)")
    print(_slurm_ext("explain", str(gpt_job), config=config))
    _say("Slurm's own view: sprio (site factor set by the service)")
    print(cluster.run("sprio", "-o", "%.6i %.10Y %.10S %.8A %.8F"))
    on_node1 = {
        j.job_id for j in client.jobs(states=("RUNNING", "COMPLETED")) if "node1" in j.nodes
    }
    latest = {}
    for r in Store(store, readonly=True).reports():
        if r.job_id in on_node1:
            latest[r.job_id] = r  # cumulative: the last report per job holds the totals
    _say(f"node agent reports from node1 stored by the service (jobs {sorted(latest)})")
    for r in latest.values():
        print(
            f"  job {r.job_id}: {r.gpu_seconds:.0f} GPU-s, GPU energy {r.gpu_energy_j:.0f} J, "
            f"mean GPU util {r.gpu_util_mean:.2f}, CPU cores used {r.cpu_cores_used:.2f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to watch the queue")
    ap.add_argument("--keep", action="store_true", help="keep everything running until Ctrl-C")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="slurm-ext-demo-"))
    _say(f"starting a local Slurm cluster (4 nodes x 4 GPUs) in {root}")
    cluster = LocalCluster(root=root / "cluster")
    cluster.start()
    service = agent = None
    stop = threading.Event()
    driver: threading.Thread | None = None
    try:
        print(cluster.run("sinfo", "-N", "-o", "%N %t %G %c"))
        secret = root / "report.secret"
        secret.write_bytes(os.urandom(24).hex().encode())
        secret.chmod(0o600)
        port = _free_port()
        config = root / "service.toml"
        config.write_text(service_toml(root, cluster.conf_path, port, secret))
        _say(f"starting the priority service: slurm-ext serve --config {config}")
        service = _start(
            [sys.executable, "-m", "slurm_ext.cli", "serve", "--config", str(config)],
            root / "service.log",
        )
        metrics_port = _free_port()
        processes = root / "gpu-processes.json"
        processes.write_text("[]")
        agent_config = root / "agent.toml"
        agent_config.write_text(
            agent_toml(root, cluster.conf_path, port, secret, metrics_port, processes)
        )
        _say(f"starting a node agent for node1: slurm-ext-agent run --config {agent_config}")
        agent = _start(
            [sys.executable, "-m", "nodeagent.cli", "run", "--config", str(agent_config)],
            root / "agent.log",
        )
        client = CliSlurmClient(slurm_conf=str(cluster.conf_path), timeout=20)
        driver = threading.Thread(
            target=_drive_gpus, args=(processes, client, "node1", stop), daemon=True
        )
        driver.start()
        print(
            f"agent metrics: http://127.0.0.1:{metrics_port}/metrics   "
            f"service metrics: http://127.0.0.1:{port}/metrics"
        )
        ids = _submit_workload(cluster)
        _watch(config, args.seconds, args.keep)
        _show_results(cluster, client, config, root / "service.db", ids["gpt-8gpu"])
        print(f"\nlogs and state are in {root}")
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        _say("stopping the agent, the service and the cluster (by PID)")
        stop.set()
        if driver is not None:
            driver.join(10)
        _stop(agent)
        _stop(service)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
