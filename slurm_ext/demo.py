"""`make demo`: a real local Slurm cluster, the priority service and a node agent, end to end.

Starts 4 slurmd x 4 (fake-device) GPUs and one slurmctld, the service (`slurm-ext serve`)
against them, and a node agent for node1 with simulated GPUs that follow the real
allocation (there is no GPU here), submits a small mixed DL workload, and prints the
queue as the suite sees it while it runs. Everything is stopped by PID at the end.

    python -m slurm_ext.demo [--seconds 60] [--keep]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_ext.slurm import CliSlurmClient
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


def _drive_gpus(reader, client: CliSlurmClient, node: str, stop: threading.Event) -> None:
    """Put the processes of jobs Slurm runs on `node` onto the simulated GPUs."""
    while not stop.is_set():
        try:
            jobs = [j for j in client.jobs(states=("RUNNING",)) if node in j.nodes]
        except Exception:  # the demo goes on if Slurm blinks
            jobs = []
        placed: dict[int, int] = {}
        slot = 0
        for job in sorted(jobs, key=lambda j: j.job_id):
            per_node = job.gpus_per_node or max(1, job.gpus // max(1, len(job.nodes)))
            for pid in _pids_of_job(job.job_id):
                for k in range(per_node):
                    if slot + k < len(reader.gpus):
                        placed[pid] = slot + k
                        reader.assign(
                            pid, slot + k, memory_bytes=(20 + job.job_id % 40) << 30, sm_util=0.85
                        )
            slot += per_node
        for index in range(len(reader.gpus)):
            busy = any(i == index for i in placed.values())
            reader.set_gpu(index, util=0.9 if busy else 0.0, power_w=650.0 if busy else 70.0)
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


def agent_config(root: Path, slurm_conf: Path, port: int, secret: Path):
    """The demo agent's configuration. Its Slurm queries (job classes, thaw checks) go to
    the demo cluster: no SLURM_CONF in the environment points there."""
    from nodeagent.config import (  # noqa: PLC0415 - the demo imports the agent lazily
        AgentConfig,
        ExporterConfig,
        GpuConfig,
        JobsConfig,
        ReportConfig,
    )

    return AgentConfig(
        node_name="node1",
        interval_s=2.0,
        state_file=str(root / "agent-state.json"),
        gpu=GpuConfig(backend="simulated", simulated_count=4),
        exporter=ExporterConfig(listen="127.0.0.1", port=_free_port()),
        report=ReportConfig(
            enabled=True,
            service_url=f"http://127.0.0.1:{port}",
            secret_file=str(secret),
            interval_s=6.0,
            spool_dir=str(root / "spool"),
        ),
        jobs=JobsConfig(slurm_conf=str(slurm_conf), timeout_s=20.0),
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to watch the queue")
    ap.add_argument("--keep", action="store_true", help="keep everything running until Ctrl-C")
    args = ap.parse_args()

    from nodeagent.agent import Agent
    from nodeagent.energy import RaplReader
    from nodeagent.exporter import serve as serve_agent_metrics
    from nodeagent.gpu import SimulatedGpuReader
    from nodeagent.report import ReportSender

    root = Path(tempfile.mkdtemp(prefix="slurm-ext-demo-"))
    _say(f"starting a local Slurm cluster (4 nodes x 4 GPUs) in {root}")
    cluster = LocalCluster(root=root / "cluster")
    cluster.start()
    service = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        print(cluster.run("sinfo", "-N", "-o", "%N %t %G %c"))
        secret = root / "report.secret"
        secret.write_bytes(os.urandom(24).hex().encode())
        secret.chmod(0o600)
        port = _free_port()
        config = root / "service.toml"
        config.write_text(
            f'interval_s = 2.0\nstore = "{root}/service.db"\nport = {port}\n'
            f'report_secret_file = "{secret}"\nplacement = true\npreemption = "requeue"\n'
            f'[slurm]\nbackend = "cli"\nslurm_conf = "{cluster.conf_path}"\n'
            # queue limits scaled to a one-minute demo: demoted after 20 s and 200 s of run
            # (x GPUs in GPU-seconds: queue_gpu_exponent 1)
            '[policy]\npolicy = "gittins"\nqueue_thresholds_gpu_s = [20.0, 200.0]\n'
            "starvation_factor = 4.0\nmin_run_s = 30.0\n"
        )
        _say(f"starting the priority service: slurm-ext serve --config {config}")
        service = subprocess.Popen(
            [sys.executable, "-m", "slurm_ext.cli", "serve", "--config", str(config)],
            stdout=open(root / "service.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _say("starting a node agent for node1 (simulated GPUs following Slurm's allocation)")
        agent_cfg = agent_config(root, cluster.conf_path, port, secret)
        reader = SimulatedGpuReader(4)
        agent = Agent(agent_cfg, reader, RaplReader(agent_cfg.energy.rapl_root))
        agent.sender = ReportSender(
            agent_cfg.report.service_url,
            agent.node,
            secret.read_bytes().strip(),
            agent_cfg.report.spool_dir,
            agent_cfg.report.spool_max_batches,
            agent_cfg.report.timeout_s,
            backoff_base_s=2.0,
            backoff_max_s=10.0,
        )
        server, _ = serve_agent_metrics(
            agent,
            agent_cfg.exporter.listen,
            agent_cfg.exporter.port,
            agent_cfg.exporter.jobstats_compat,
        )
        client = CliSlurmClient(slurm_conf=str(cluster.conf_path), timeout=20)
        threads = [
            threading.Thread(target=agent.run, args=(stop,), daemon=True),
            threading.Thread(target=_drive_gpus, args=(reader, client, "node1", stop), daemon=True),
        ]
        for t in threads:
            t.start()
        print(
            f"agent metrics: http://127.0.0.1:{agent_cfg.exporter.port}/metrics   service metrics: http://127.0.0.1:{port}/metrics"
        )

        _say("submitting a mixed DL workload")
        ids = {}
        for name, sb_args, secs in WORKLOAD:
            ids[name] = cluster.sbatch("-J", name, *sb_args, wrap=f"sleep {secs}")
            print(f"  {ids[name]:>3}  {name:<16} {' '.join(sb_args)}  (runs {secs}s)")
            time.sleep(0.3)

        deadline = time.monotonic() + args.seconds
        shown = 0
        while args.keep or time.monotonic() < deadline:
            time.sleep(10 if shown else 6)
            shown += 1
            _say(f"slurm-ext queue  (t+{shown * 10 - 4}s)")
            print(_slurm_ext("queue", config=config))
        _say("slurm-ext nodes")
        print(_slurm_ext("nodes", config=config))
        _say(f"slurm-ext explain {ids['gpt-8gpu']}  (the 8-GPU job)")
        print(_slurm_ext("explain", str(ids["gpt-8gpu"]), config=config))
        _say("Slurm's own view: sprio (site factor set by the service)")
        print(cluster.run("sprio", "-o", "%.6i %.10Y %.10S %.8A %.8F"))
        from slurm_ext.store import Store

        on_node1 = {
            j.job_id for j in client.jobs(states=("RUNNING", "COMPLETED")) if "node1" in j.nodes
        }
        latest = {}
        for r in Store(root / "service.db", readonly=True).reports():
            if r.job_id in on_node1:
                latest[r.job_id] = r  # cumulative: the last report per job holds the totals
        _say(f"node agent reports from node1 stored by the service (jobs {sorted(latest)})")
        for r in latest.values():
            print(
                f"  job {r.job_id}: {r.gpu_seconds:.0f} GPU-s, GPU energy {r.gpu_energy_j:.0f} J, "
                f"mean GPU util {r.gpu_util_mean:.2f}, CPU cores used {r.cpu_cores_used:.2f}"
            )
        print(f"\nlogs and state are in {root}")
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        _say("stopping the agent, the service and the cluster (by PID)")
        stop.set()
        for t in threads:
            t.join(10)
        if service is not None and service.poll() is None:
            service.terminate()
            service.wait(15)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
