"""`slurm-ext-agent`: run the node agent, or show one sample."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import click

from nodeagent import __version__
from nodeagent.agent import Agent, node_name
from nodeagent.config import AgentConfig
from nodeagent.energy import RaplReader
from nodeagent.gpu import GpuReader, GpuUnavailable, NvmlGpuReader, SimulatedGpuReader
from nodeagent.progress import ProgressReader
from nodeagent.report import ReportSender
from nodeagent.snapshot import AgentSnapshot
from nodeagent.state import lock_state
from slurm_ext.core.classes import load_classes
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.model import JobClasses
from slurm_ext.core.reports import SecretFileError, node_key, node_name_ok, read_secret

log = logging.getLogger("nodeagent")


def _load(path: str | None) -> tuple[AgentConfig, JobClasses]:
    """The config and the co-location classes file it names, or exit 2 naming the file
    and the key."""
    try:
        config = load_config(AgentConfig, path)
        return config, load_classes(config.classes_file)
    except ConfigError as exc:
        click.echo(f"slurm-ext-agent: {exc}", err=True)
        sys.exit(2)


def make_gpu_reader(backend: str, config: AgentConfig) -> GpuReader | None:
    """The configured backend; NVML being unavailable is reported, not fatal."""
    if backend == "none":
        return None
    if backend == "simulated":
        return SimulatedGpuReader(
            config.gpu.simulated_count, processes_file=config.gpu.simulated_processes_file
        )
    try:
        return NvmlGpuReader(config.gpu.util_window_s, config.gpu.energy_interval_s)
    except GpuUnavailable as exc:
        log.error("%s; continuing without GPU readings", exc)
        return None


@click.group()
@click.version_option(__version__, "-V", "--version", prog_name="slurm-ext-agent")
@click.option(
    "-v", "--verbose", count=True, help="Log more than the configured log_level (-vv: debug)."
)
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Node agent: GPU/CPU utilisation and energy per job, Prometheus, co-location."""
    ctx.obj = verbose


def _setup_logging(config: AgentConfig) -> int:
    """Log at the configured level, one step lower per -v; returns the level."""
    verbose = click.get_current_context().find_root().obj or 0
    level = max(logging.DEBUG, logging.getLevelName(config.log_level) - 10 * verbose)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return level


@main.command()
@click.option("--config", "config_path", default="/etc/slurm-ext/agent.toml", show_default=True)
@click.option("--once", is_flag=True, help="Take one sample, report, and exit.")
@click.option("--interval", type=float, default=None, help="Seconds between samples.")
def run(config_path: str, once: bool, interval: float | None) -> None:
    """Run the agent until SIGTERM/SIGINT; paused jobs are resumed on the way out."""
    config, classes = _load(config_path)
    if interval is not None:
        if interval <= 0:
            click.echo("slurm-ext-agent: --interval must be > 0", err=True)
            sys.exit(2)
        config.interval_s = interval
    _setup_logging(config)
    _lock(config)
    sender = None
    if config.report.enabled:
        try:
            secret = read_secret(config.report.secret_file)
        except SecretFileError as exc:
            click.echo(f"slurm-ext-agent: {config_path}: report.secret_file: {exc}", err=True)
            sys.exit(2)
        sender = ReportSender(
            config.report.service_url,
            node_name(config),
            secret,
            config.report.spool_dir,
            config.report.spool_max_batches,
            config.report.timeout_s,
            backoff_base_s=config.interval_s,
            backoff_max_s=config.report.backoff_max_s,
        )
    agent = Agent(
        config,
        make_gpu_reader(config.gpu.backend, config),
        RaplReader(config.energy.rapl_root),
        sender=sender,
        classes=classes,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if config.exporter.enabled and not once:
        server, _ = _serve(agent, config)
        log.info("metrics on http://%s:%d/metrics", config.exporter.listen, server.server_port)
    agent.run(stop, once=once)


@main.command()
@click.option("--config", "config_path", default="/etc/slurm-ext/agent.toml", show_default=True)
@click.option(
    "--wait",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to keep asking Slurm when it cannot answer.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Thaw even jobs Slurm cannot vouch for (it might have suspended them itself).",
)
def thaw(config_path: str, wait: float, force: bool) -> None:
    """Thaw every job a stopped or killed agent left frozen, per its state file, except
    jobs Slurm itself suspended (systemd's ExecStopPost). Run it only while the agent is
    stopped. Exit status 1 when jobs stay frozen because Slurm could not be asked."""
    config, classes = _load(config_path)
    _setup_logging(config)
    _lock(config)  # never beside a running agent: it thaws on its own way out
    agent = Agent(config, None, None, classes=classes)  # its state file thaws what it can
    deadline = time.monotonic() + wait
    while agent.coloc.paused and time.monotonic() < deadline:
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        agent.coloc.recover()
    if agent.coloc.paused and force:
        agent.coloc.recover(force=True)
    if agent.coloc.paused:
        click.echo(
            f"slurm-ext-agent thaw: jobs {sorted(agent.coloc.paused)} stay frozen: Slurm cannot say "
            "whether it suspended them; they are thawed at the agent's next start once it "
            "can (or run: slurm-ext-agent thaw --force)",
            err=True,
        )
        sys.exit(1)
    click.echo("slurm-ext-agent thaw: no job left frozen by the agent")


@main.command("report-key")
@click.argument("node")
@click.option(
    "--master",
    default="/etc/slurm-ext/report.secret",
    show_default=True,
    help="The service's report_secret_file.",
)
def report_key(node: str, master: str) -> None:
    """Print NODE's own report key, derived from the service's secret. Put it (mode 0600)
    in that node's report.secret_file instead of the shared secret: the node can then
    sign reports as itself only."""
    if not node_name_ok(node):
        click.echo(f"slurm-ext-agent: bad node name {node!r}", err=True)
        sys.exit(2)
    try:
        secret = read_secret(master)
    except SecretFileError as exc:
        click.echo(f"slurm-ext-agent: --master: {exc}", err=True)
        sys.exit(2)
    click.echo(node_key(secret, node).decode())


def _lock(config: AgentConfig) -> None:
    """One agent (or `thaw`) per state file; exit 2 naming the lock otherwise."""
    if not config.state_file:
        return
    path = Path(config.state_file)
    try:
        held = lock_state(path)
    except OSError as exc:
        click.echo(f"slurm-ext-agent: cannot lock {path}.lock: {exc}", err=True)
        sys.exit(2)
    if held is None:
        click.echo(
            f"slurm-ext-agent: another agent (or thaw) holds {path}.lock: "
            "one per state file; stop it first",
            err=True,
        )
        sys.exit(2)


def _serve(agent: Agent, config: AgentConfig):
    from nodeagent.exporter import serve  # noqa: PLC0415 - only when exporting

    return serve(
        agent, config.exporter.listen, config.exporter.port, config.exporter.jobstats_compat
    )


@main.command()
@click.option("--config", "config_path", default=None, help="Agent TOML (defaults if absent).")
@click.option(
    "--backend", type=click.Choice(["nvml", "simulated", "none"]), default=None, help="GPU backend."
)
@click.option("--json", "as_json", is_flag=True, help="Print the sample as JSON.")
@click.option(
    "--wait", type=float, default=2.0, show_default=True, help="Seconds between the two samples."
)
def show(config_path: str | None, backend: str | None, as_json: bool, wait: float) -> None:
    """Take two samples `--wait` apart and print everything seen: GPUs (every field NVML
    gave and each per-call error), energy-counter growth against power, process -> job
    mapping, per-job use. Nothing is paused, reported or persisted."""
    config, classes = _load(config_path)
    config.colocation.enabled = False
    config.state_file = ""  # never read or write the daemon's state
    reader = None
    backend = backend or config.gpu.backend
    error = None
    if backend == "nvml":
        try:
            reader = NvmlGpuReader(config.gpu.util_window_s)  # counter at every read
        except GpuUnavailable as exc:
            error = str(exc)
    elif backend == "simulated":
        reader = SimulatedGpuReader(
            config.gpu.simulated_count, processes_file=config.gpu.simulated_processes_file
        )
    if not click.get_current_context().find_root().obj:  # -v: show the agent's log too
        logging.disable(logging.WARNING)
    else:
        _setup_logging(config)
    agent = Agent(config, reader, RaplReader(config.energy.rapl_root), classes=classes)
    t_first = time.monotonic()
    agent.step()
    first = {g.uuid: g.energy_mj for g in agent.snapshot.gpus}
    time.sleep(wait)
    elapsed = time.monotonic() - t_first  # the second read comes as early in its step
    agent.step()
    doc = show_doc(agent.snapshot, first, elapsed, ProgressReader(config.proc_root))
    doc.update(backend=backend, backend_error=error)
    doc["describe"] = reader.describe() if reader is not None else None
    doc["rapl_available"] = agent.rapl.available if agent.rapl else False
    doc["errors"] += sorted(agent.rapl.reported if agent.rapl else [])
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    click.echo(f"node {doc['node']} backend {backend}" + (f" ({error})" if error else ""))
    host = doc["host"]
    if host is not None:
        click.echo(
            f"  host cpus={host['cpu_count']} cpu={host['cpu_utilization']} "
            f"mem available={host['memory_available_bytes']}/{host['memory_total_bytes']}"
        )
    for g in doc["gpus"]:
        click.echo(
            f"  gpu {g['label']} {g['uuid']} {g['name']} util={g['util']} "
            f"mem={g['memory_used_bytes']}/{g['memory_total_bytes']} power={g['power_w']} W "
            f"energy={g['energy_mj']} mJ procs={len(g['processes'])} errors={list(g['errors'])}"
        )
    for p in doc["gpu_processes"]:
        job = f"job {p['job_id']}" if p["job_id"] is not None else "NO JOB"
        click.echo(
            f"  gpu {p['gpu']} pid {p['pid']} {job} user={p['user']} cpu%={p['cpu_percent']} "
            f"rss={p['rss_bytes']} gpu_mem={p['gpu_memory_bytes']} cmd={p['command']!r}"
        )
    for job, j in doc["jobs"].items():
        click.echo(
            f"  job {job} ({j['class']}, {j['mapped_by']}) pids={j['pids']} gpus={j['gpus']}"
            f" progress/s={j['progress_per_s']}"
        )


def show_doc(
    snap: AgentSnapshot, first_mj: dict[str, int | None], elapsed: float, progress: ProgressReader
) -> dict:
    """What `show` prints, from the second sample's snapshot: GPUs (with the energy
    counter's growth since `first_mj`), the processes on them as psutil describes them
    (those in no job included), the host, and each job with its progress rate."""
    doc: dict = {
        "node": snap.node,
        "gpus": [],
        "gpu_processes": [dataclasses.asdict(p) for p in snap.gpu_processes],
        "host": dataclasses.asdict(snap.host) if snap.host is not None else None,
        "jobs": {},
        "errors": list(snap.warnings),
    }
    for g in snap.gpus:
        d = dataclasses.asdict(g)
        e0 = first_mj.get(g.uuid)
        if e0 is not None and g.energy_mj is not None:
            d["energy_counter_growth_w"] = (g.energy_mj - e0) / 1000.0 / elapsed
        d["label"] = g.label
        doc["gpus"].append(d)
    for job, v in snap.jobs.items():
        doc["jobs"][str(job)] = {
            "pids": list(v.pids),
            "mapped_by": "environ" if v.from_environ else "cgroup",
            "class": v.klass,
            "qos": v.qos,
            "partition": v.partition,
            "gpus": [u.gpu.uuid for u in snap.job_gpu if u.job_id == job],
            # from the job's SLURM_EXT_PROGRESS_FILE, as co-location would read it
            "progress_per_s": progress.rate(job, v.procs, time.time()) if v.pids else None,
            "report": dataclasses.asdict(v.report),
        }
    return doc


if __name__ == "__main__":
    main()
