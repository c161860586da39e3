"""Live co-location: a replay with opportunistic jobs on gres/shard and a node agent per
node, against Slurm alone on the same cluster, to check that the live modes order as
the simulator's do (benchmarks/bench_coloc_live.py).

The cluster (`LocalCluster(shards_per_gpu=S)`) gives each GPU S - 1 shards on a second
device file (Slurm never lets a gres/shard job onto a GPU a gres/gpu job holds, so GPU i
is "full" device i for whole-GPU jobs and "share" device G + i for shards). In the
shared mode a 1-GPU opportunistic job asks `--gres=shard:1` in partition `opp` (its
class for the agent, and its own queue, as in the simulator); every other job asks
whole GPUs of type "full" in the default partition. Slurm alone runs the same trace on
the same cluster with every job on whole GPUs.

There is no GPU here, so `GpuModel` stands in for one per (node, index): each loop it
finds the payloads (shared_payload.py, in freezer cgroups named like Slurm's), asks
`scontrol show job -d` once per job which GPU indices Slurm gave it, reads which jobs
the agents froze, and computes every job's speed with the simulator's interference
model (`sim.sharing.speeds`, the jobs' profiles the same as the simulator's). It
writes each job's speed where its payload reads it, and gives each node's agent (a
real `nodeagent.agent.Agent` on a `SimulatedGpuReader`) per-process utilisation
(solo utilisation x speed, 0 when frozen), memory and GPU power (`PowerModel`). The
agent decides with its own code and freezes and thaws the payloads' cgroups itself.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from slurm_ext.replay import shared_payload
from slurm_ext.replay.plan import ReplayJob, plan, sbatch_args
from slurm_ext.replay.records import JobRecord
from slurm_ext.replay.run import Replay, ReplayError
from slurm_ext.replay.slurmconf import replay_conf
from slurm_ext.replay.target import Target, cpus_per_node
from slurm_ext.sim.sharing import Interference, JobProfile, PowerModel, busy_fraction, speeds
from slurm_ext.slurm.hostlist import expand_hostlist
from slurm_ext.testing.cluster import LocalCluster

SHARE_PARTITION = "opp"
MODES = ("alone", "shared")
MODEL_S = 0.5  # GpuModel loop
GPU_MEMORY_BYTES = 80 * 2**30
FREEZER = "/sys/fs/cgroup/freezer"
_GRES = re.compile(r"Nodes=(\S+) .*GRES=\S*?\(IDX:([\d,\-]+)\)")

log = logging.getLogger(__name__)


def on_shard(job: ReplayJob, mode: str) -> bool:
    """Whether the job runs on a shard: shared mode, opportunistic, one GPU."""
    return mode == "shared" and job.trace.opportunistic and job.trace.gpus == 1


def shared_sbatch_args(job: ReplayJob, partition: str, jobs_dir: str, mode: str) -> list[str]:
    """`plan.sbatch_args` with GPUs of type "full", or one shard in partition `opp`."""
    out = []
    for a in sbatch_args(job, partition, jobs_dir):
        if a.startswith("--gres=gpu:"):
            a = "--gres=shard:1" if on_shard(job, mode) else f"--gres=gpu:full:{a[11:]}"
        elif a.startswith("--gpus="):
            a = f"--gpus=full:{a[7:]}"
        elif a.startswith("--partition=") and on_shard(job, mode):
            a = f"--partition={SHARE_PARTITION}"
        out.append(a)
    return out


def parse_gpu_indices(text: str) -> dict[str, list[int]]:
    """Node -> GPU device indices from `scontrol show job -d` (its "GRES=...(IDX:..)")."""
    out: dict[str, list[int]] = {}
    for m in _GRES.finditer(text):
        idx: list[int] = []
        for part in m.group(2).split(","):
            lo, _, hi = part.partition("-")
            idx.extend(range(int(lo), int(hi or lo) + 1))
        for node in expand_hostlist(m.group(1)):
            out[node] = idx
    return out


class NodeAgents(Protocol):
    """The node agents of a co-location replay (`nodeagent.replay.ReplayAgents`: the agent
    may import slurm_ext, not the reverse, so the replay gets them from its caller)."""

    nodes: Sequence[str]

    def start(self, nodes: Sequence[str], workdir: Path, gpus_per_node: int) -> None: ...

    def publish(
        self, node: str, index: int, busy: float, watts: float, procs: list[tuple[int, int, float]]
    ) -> None:
        """GPU `index` of `node` now: busy fraction, watts, (pid, memory bytes, utilisation)."""

    def stop(self) -> None: ...

    def actions(self) -> dict[str, int]:
        """Pauses and resumes the agents made so far, by kind ("pause", "resume")."""
        ...


@dataclass
class Placed:
    """A running payload as the model sees it."""

    trace_id: int
    pids: list[int]
    gpus: list[tuple[str, int]]  # (node, physical GPU index)
    frozen: bool = False


@dataclass
class GpuModel:
    """The cluster's simulated GPUs (see the module docstring); `run` loops until `stop`."""

    env: dict[str, str]
    jobs_dir: Path
    freezer_top: Path
    gpus_per_node: int
    agents: NodeAgents  # gets each GPU's readings
    profiles: Mapping[int, JobProfile]  # trace job id -> profile
    slurm_to_trace: Mapping[int, int]  # filled by the replay as it submits
    interference: Interference = Interference()
    power: PowerModel = PowerModel()
    stop: threading.Event = field(default_factory=threading.Event)
    placed: dict[int, Placed] = field(default_factory=dict)  # Slurm id -> running payload
    energy_j: float = 0.0  # every GPU, idle ones at idle power
    busy_gpu_s: float = 0.0
    sharing: set[int] = field(default_factory=set)  # trace ids that ran beside another job
    shard_ids: set[int] = field(default_factory=set)  # trace ids Slurm gave a gres/shard
    errors: int = 0
    _last: float | None = None
    _watts: float = 0.0
    _busy: float = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except Exception:  # the replay goes on; counted and reported
                self.errors += 1
                log.exception("GPU model step failed")
            self.stop.wait(MODEL_S)

    def step(self) -> None:
        now = time.monotonic()
        if self._last is not None:
            self.energy_j += self._watts * (now - self._last)
            self.busy_gpu_s += self._busy * (now - self._last)
        self._last = now
        self._scan()
        by_gpu: dict[tuple[str, int], list[int]] = {}
        for sid, p in self.placed.items():
            for k in p.gpus:
                by_gpu.setdefault(k, []).append(sid)
        speed = {sid: 1.0 for sid in self.placed}
        for sids in by_gpu.values():
            active = [s for s in sids if not self.placed[s].frozen]
            sp = speeds([self.profiles[self.placed[s].trace_id] for s in active], self.interference)
            for s, v in zip(active, sp, strict=True):
                speed[s] = min(speed[s], v)
        for sid, p in self.placed.items():
            v = 0.0 if p.frozen else speed[sid]
            speed[sid] = v
            _write_atomic(self.jobs_dir / f"replay-{p.trace_id}.speed", f"{v:.4f}")
            if any(len(by_gpu[k]) > 1 for k in p.gpus):
                self.sharing.add(p.trace_id)
        n_gpus = len(self.agents.nodes) * self.gpus_per_node
        self._watts, self._busy = self.power.idle_w * n_gpus, 0.0
        for node in self.agents.nodes:
            for i in range(self.gpus_per_node):
                sids = by_gpu.get((node, i), [])
                procs: list[tuple[int, int, float]] = []
                profs = [self.profiles[self.placed[s].trace_id] for s in sids]
                for s, prof in zip(sids, profs, strict=True):
                    util = prof.util * speed[s]
                    mem = int(prof.mem * GPU_MEMORY_BYTES)
                    procs += [(pid, mem, util) for pid in self.placed[s].pids]
                busy = busy_fraction(profs, [speed[s] for s in sids]) if sids else 0.0
                watts = self.power.watts(busy)
                self._watts += watts - self.power.idle_w
                self._busy += busy
                self.agents.publish(node, i, busy, watts, procs)

    def _scan(self) -> None:
        """Running payloads from the freezer cgroups; Slurm's GPU indices for new ones."""
        root = self.freezer_top / "uid_0"
        seen: set[int] = set()
        for d in sorted(root.glob("job_*")) if root.exists() else []:
            sid = int(d.name[4:])
            pids = _read_pids(d / "step_0" / "cgroup.procs")
            if not pids:
                _rmdir_job(d)
                self.placed.pop(sid, None)
                continue
            seen.add(sid)
            p = self.placed.get(sid)
            if p is None:
                trace_id = self.slurm_to_trace.get(sid)
                gpus = self._gpus_of(sid, trace_id)
                if trace_id is None or gpus is None:
                    continue
                p = self.placed[sid] = Placed(trace_id, pids, gpus)
            p.pids = pids
            p.frozen = _read(d / "freezer.state") in ("FROZEN", "FREEZING")
        for sid in [s for s in self.placed if s not in seen]:
            del self.placed[sid]

    def _gpus_of(self, sid: int, trace_id: int | None) -> list[tuple[str, int]] | None:
        try:
            res = subprocess.run(
                ["scontrol", "show", "job", "-d", str(sid)],
                env=self.env, capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return None
        idx = parse_gpu_indices(res.stdout)
        if trace_id is not None and "GRES=shard:" in res.stdout:
            self.shard_ids.add(trace_id)
        g = self.gpus_per_node
        return [(node, i % g) for node, ids in sorted(idx.items()) for i in ids] or None

    def cleanup(self) -> None:
        """Thaw and remove whatever cgroups are left (the jobs were cancelled by then)."""
        root = self.freezer_top / "uid_0"
        for d in sorted(root.glob("job_*")) if root.exists() else []:
            _write(d / "freezer.state", "THAWED")
            _rmdir_job(d)
        for d in (root, self.freezer_top):
            try:
                d.rmdir()
            except OSError:
                pass


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read_pids(path: Path) -> list[int]:
    return [int(x) for x in _read(path).split() if x.isdigit()]


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _rmdir_job(d: Path) -> None:
    for sub in (d / "step_0", d):
        for _ in range(20):
            try:
                sub.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)


@dataclass
class SharedReplay(Replay):
    """`Replay` submitting shared_payload.py with shard or typed-GPU requests."""

    mode: str = "alone"
    freezer_top: Path = Path()
    slurm_to_trace: dict[int, int] = field(default_factory=dict)

    def _argv(self, job: ReplayJob) -> list[str]:
        speed = self.jobs_dir / f"{job.name}.speed"
        cmd = [
            sys.executable, "-I", shared_payload.__file__,
            f"{job.work_wall_s:.3f}", str(speed), str(self.freezer_top),
        ]  # fmt: skip
        args = shared_sbatch_args(job, self.target.partition, str(self.jobs_dir), self.mode)
        return ["sbatch", *args, "--wrap=exec " + shlex.join(cmd)]

    def _sbatch(self, job: ReplayJob) -> int:
        sid = super()._sbatch(job)
        self.slurm_to_trace[sid] = job.trace.job_id
        return sid


def class_summary(
    records: Mapping[int, JobRecord], planned: Mapping[int, ReplayJob], speedup: float
) -> dict[str, float]:
    """Avg JCT (trace seconds) and timeouts per class, from Slurm's records."""
    out: dict[str, float] = {}
    for klass, opp in (("guaranteed", False), ("opportunistic", True)):
        jct = [
            (r.end - r.submit) * speedup
            for sid, r in records.items()
            if r.end is not None and planned[sid].trace.opportunistic == opp
        ]
        out[f"{klass}_jobs"] = len(jct)
        out[f"{klass}_avg_jct_s"] = sum(jct) / len(jct) if jct else 0.0
        out[f"{klass}_timeouts"] = sum(
            r.state == "TIMEOUT"
            for sid, r in records.items()
            if planned[sid].trace.opportunistic == opp
        )
    return out


@dataclass(frozen=True)
class SharedCluster:
    """The fresh local cluster a co-location replay starts: its shape and each GPU's
    shards (the jobs that may share it)."""

    nodes: int
    gpus_per_node: int
    shards_per_gpu: int = 2


def replay_coloc(
    jobs: Sequence,
    mode: str,
    workdir: Path,
    speedup: float,
    shape: SharedCluster,
    profiles: Mapping[int, JobProfile],
    agents: NodeAgents,
    seed: int = 0,
    say=lambda msg: print(msg, file=sys.stderr, flush=True),
) -> dict[str, float]:
    """One mode ("alone" or "shared") on a fresh local cluster with shard gres and an agent
    per node; its row: per-class avg JCT, pauses and resumes, GPU energy and utilisation."""
    nodes, gpus_per_node, shards_per_gpu = shape.nodes, shape.gpus_per_node, shape.shards_per_gpu
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if shards_per_gpu < 2:
        raise ValueError(f"shards_per_gpu must be >= 2 (jobs per GPU), got {shards_per_gpu}")
    if not Path(FREEZER, "freezer.state").exists() and not Path(FREEZER).is_dir():
        raise ReplayError(f"no cgroup v1 freezer at {FREEZER}: the agents could not pause")
    planned = plan(jobs, speedup, nodes, gpus_per_node, "slurm", 0.0, seed)
    workdir.mkdir(parents=True, exist_ok=True)
    conf = replay_conf(speedup, max(j.limit_min for j in planned))
    cluster = LocalCluster(
        nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node(gpus_per_node),
        root=workdir / "cluster", extra_conf=conf, shards_per_gpu=shards_per_gpu,
    )  # fmt: skip
    top = Path(FREEZER) / f"slurm_ext_replay_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    stop = threading.Event()
    thread = None
    model = None
    try:
        cluster.start(timeout=120)
        tgt = Target(cluster.env, cluster.partition, nodes, gpus_per_node, False, cluster)
        replay = SharedReplay(
            tgt, planned, workdir / "jobs", 0.0, f"[{mode}] ", say, mode=mode, freezer_top=top
        )
        model = GpuModel(
            cluster.env, workdir / "jobs", top, gpus_per_node, agents, profiles,
            replay.slurm_to_trace, stop=stop,
        )  # fmt: skip
        (workdir / "jobs").mkdir(parents=True, exist_ok=True)
        agents.start(cluster.node_names, workdir, gpus_per_node)
        thread = threading.Thread(target=model.run, daemon=True)
        thread.start()
        records, _ = replay.run()
        by_sid = {sid: replay.submitted[sid] for sid in replay.submitted}
        row: dict[str, float] = {"mode": mode}  # type: ignore[dict-item]
        row.update(class_summary(records, by_sid, speedup))
        acts = agents.actions()
        row["pauses"], row["resumes"] = acts.get("pause", 0), acts.get("resume", 0)
        row["on_shards"] = sum(on_shard(j, mode) for j in planned)
        row["jobs_sharing_a_gpu"] = len(model.sharing)
        row["started_on_shard"] = len(model.shard_ids)
        row["opportunistic_sharing"] = len(model.sharing & model.shard_ids)
        work_gpu_s = sum(j.trace.gpus * j.work_wall_s for j in planned)
        row["kwh_per_gpu_hour_of_work"] = model.energy_j / 3.6e6 / (work_gpu_s / 3600.0)
        span = max((r.end for r in records.values() if r.end), default=0.0) - min(
            (r.submit for r in records.values()), default=0.0
        )
        row["gpu_utilization"] = model.busy_gpu_s / (nodes * gpus_per_node * span) if span else 0.0
        row["model_errors"] = model.errors
        return row
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=15)
        agents.stop()  # thaws whatever they froze
        cluster.stop()
        if model is not None:
            model.cleanup()


def sim_trace(planned: Sequence[ReplayJob], speedup: float) -> list:
    """The planned jobs as the simulator should see them: the live limits (whole wall
    minutes, scaled back to trace seconds)."""
    return [replace(j.trace, time_limit_s=j.limit_min * 60.0 * speedup) for j in planned]
