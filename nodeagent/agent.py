"""The node agent loop: sample, map processes to jobs, attribute energy, enforce
co-location, report, persist. Each part is an adapter, a pure function or (co-location)
its own controller; this module wires them, keeps the per-job running totals and
publishes each step's result as a frozen `AgentSnapshot` (nodeagent/snapshot.py).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nodeagent.accounts import JobAccount, JobGpuUse, account_gpu, job_gpu_use
from nodeagent.cgroups import (
    CgroupMounts,
    JobProcesses,
    JobScanner,
    job_cpus_alloc,
    job_slurm_env,
    node_busy_cpu_s,
    read_mounts,
)
from nodeagent.colocation import ColocationController
from nodeagent.config import AgentConfig
from nodeagent.energy import GpuEnergyMeter, RaplReader, cpu_job_energy, gpu_job_weights, split
from nodeagent.freezer import JobFreezer
from nodeagent.gpu import GpuReader, GpuSample, GpuUnavailable
from nodeagent.jobinfo import JobInfo, SlurmJobInfo, vouched
from nodeagent.procinfo import GpuProcessInfo, HostView, ProcessDescriber
from nodeagent.report import JobReport, ReportSender, ReportWorker
from nodeagent.snapshot import AgentSnapshot, JobView, frozen
from nodeagent.state import (
    STATE_VERSION,
    read_state,
    restore_totals,
    set_aside,
    state_doc,
    write_state,
)
from slurm_ext.core.classes import load_classes
from slurm_ext.core.model import JobClasses
from slurm_ext.policy import colocation as co
from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.slurm.client import SlurmClient

log = logging.getLogger(__name__)
STATE_SAVE_S = 30.0
MAX_WARNINGS = 100  # distinct problems a snapshot carries (the latest)
SHUTDOWN_FLUSH_S = 1.0  # at most this (and half a sample period) for the last report flush


def node_name(config: AgentConfig) -> str:
    """The name this agent reports as: `node_name`, else the short host name."""
    return config.node_name or socket.gethostname().split(".")[0]


class Agent:
    """One node's agent. `step()` is one sample; `run()` loops until `stop` is set.

    Only the thread that steps touches the working state below; everyone else reads
    `snapshot`, the frozen result of the latest step."""

    def __init__(
        self,
        config: AgentConfig,
        gpu_reader: GpuReader | None,
        rapl: RaplReader | None = None,
        sender: ReportSender | None = None,
        mounts: CgroupMounts | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        slurm: SlurmClient | None = None,
        classes: JobClasses | None = None,
    ) -> None:
        """`slurm`: the client asked for job classes when `[jobs] source = "slurm"`
        (default: `CliSlurmClient` from `[jobs]`); `classes`: the co-location classes
        (default: read from `config.classes_file`)."""
        self.config = config
        self.node = node_name(config)
        self.gpu_reader = gpu_reader
        self.rapl = rapl
        self.sender = sender
        # reports go out on their own thread: a slow service never holds up a sample
        self.reports = ReportWorker(sender, config.interval_s) if sender is not None else None
        self.mounts = mounts if mounts is not None else read_mounts()
        self.scanner = JobScanner(config.proc_root)
        self.clock = clock
        self.wall = wall
        j = config.jobs
        self.job_info: SlurmJobInfo | None = None  # None: classes from the environment
        if j.source == "slurm":
            client = slurm or CliSlurmClient(slurm_conf=j.slurm_conf, timeout=j.timeout_s)
            self.job_info = SlurmJobInfo(client, self.node, j.cache_s)
        self.coloc = ColocationController(
            config.colocation,
            classes if classes is not None else load_classes(config.classes_file),
            JobFreezer(self.mounts, config.proc_root),
            self.job_info,
            j.cache_s,
            config.proc_root,
            clock,
            wall,
            self.save_state,
            self._error,
        )
        # psutil reads /proc itself: GPU processes are described only on the real one
        self.describer = ProcessDescriber() if config.proc_root == "/proc" else None
        self.meter = GpuEnergyMeter()
        self.accounts: dict[int, JobAccount] = {}
        self.gpu_energy_total: dict[str, float] = {}
        self.cpu_energy_total = 0.0
        self.error_counts: dict[str, int] = {}
        self.samples_total = 0
        self._last_t: float | None = None
        self._last_report = -1e18
        self._last_save = -1e18
        self._prev_cpu: dict[tuple[int, int], float] | None = None
        self._prev_node_busy: float | None = None
        self._warned: set[str] = set()  # distinct problems logged (each logged once)
        self._recent: deque[str] = deque(maxlen=MAX_WARNINGS)  # ... the latest, in order
        self._frozen_scanned = False  # jobs left frozen without a record: looked for once
        self.snapshot = AgentSnapshot(self.node)
        self._load_state()

    # ---- state -------------------------------------------------------------------------
    def _load_state(self) -> None:
        """Restore totals, and thaw every job a previous run left frozen. A damaged file
        never stops this: each part that cannot be read is logged and skipped, and a
        corrupt one is set aside (jobs frozen without a record are found at the first
        sample, `_adopt_frozen`)."""
        if not self.config.state_file:
            return
        path = Path(self.config.state_file)
        loaded = read_state(path)
        if loaded is None:
            return
        for problem in loaded.problems:
            log.error("state file %s: %s", path, problem)
        if loaded.corrupt:
            try:
                log.warning("corrupt state file %s moved to %s", path, set_aside(path, self.wall()))
            except OSError as exc:
                log.warning("corrupt state file %s could not be set aside: %s", path, exc)
        self.coloc.adopt(loaded.paused)  # first: nothing below may keep a job frozen
        doc = loaded.doc if loaded.doc.get("version") == STATE_VERSION else {}
        self.gpu_energy_total, self.cpu_energy_total = restore_totals(
            doc, path, self.accounts, self.coloc.state
        )
        if self.coloc.recovering:
            self.coloc.recover()
        self._publish([], [], {}, {}, (), None, 0.0)

    def save_state(self) -> bool:
        if not self.config.state_file:
            return True
        path = Path(self.config.state_file)
        doc = state_doc(
            self.coloc.paused.values(),
            self.accounts.values(),
            self.gpu_energy_total,
            self.cpu_energy_total,
            self.coloc.state,
            self.wall(),
        )
        try:
            write_state(path, doc)
            return True
        except OSError as exc:
            self._error("state", f"cannot write state file {path}: {exc}")
            return False

    # ---- helpers -----------------------------------------------------------------------
    def _error(self, source: str, message: str) -> None:
        """Count a problem by source; log each distinct message once."""
        self.error_counts[source] = self.error_counts.get(source, 0) + 1
        if message not in self._warned:
            self._warned.add(message)
            self._recent.append(message)
            log.warning("%s", message)

    def _read_gpus(self) -> list[GpuSample]:
        if self.gpu_reader is None:
            return []
        try:
            gpus = self.gpu_reader.read()
        except GpuUnavailable as exc:
            self._error("gpu", str(exc))
            return []
        for g in gpus:
            for err in g.errors:
                self._error("gpu", f"GPU {g.label} {g.uuid}: {err}")
        return gpus

    # ---- one sample ----------------------------------------------------------------------
    def step(self) -> list[co.Action]:
        t0 = time.process_time()
        now, wall = self.clock(), self.wall()
        dt = now - self._last_t if self._last_t is not None else 0.0
        self._last_t = now
        if self.coloc.recover_due(now):
            self.coloc.recover()
        gpus = self._read_gpus()
        gpu_pids = {p.pid for g in gpus for p in g.processes}
        jobs = self.scanner.scan(gpu_pids)
        trusted = self._trusted_info(jobs, now)
        if trusted is not None:
            jobs = self._vouched(jobs, trusted)
        job_of_pid = {pid: j for j, jp in jobs.items() for pid in jp.pids}
        for job_id, jp in jobs.items():
            new = job_id not in self.accounts
            if new:
                self.accounts[job_id] = self._new_account(jp, wall)
            self.accounts[job_id].last_seen = wall
            if trusted is not None:
                self._set_class(self.accounts[job_id], trusted.get(job_id), new)
        self._gpu_energy(gpus, job_of_pid, now)
        if not self._frozen_scanned:
            self._adopt_frozen(gpus, jobs, job_of_pid)
        uses = job_gpu_use(gpus, job_of_pid, self.coloc.paused)
        account_gpu(self.accounts, uses, dt)
        self._cpu(jobs, dt)
        klass = {j: self.accounts[j].klass for j in jobs}
        actions, rates = self.coloc.step(uses, jobs, klass)
        for job, acc in self.accounts.items():  # reported: the service requeues long pauses
            acc.paused_since = self.coloc.paused_since.get(job)
        finals = self._ended(jobs)
        described = self.describer.describe(gpus, job_of_pid) if self.describer else ()
        host = self.describer.host() if self.describer else None
        self.samples_total += 1
        self._publish(gpus, uses, jobs, rates, described, host, time.process_time() - t0)
        self._report(now, finals)  # from the snapshot; its problems show in the next one
        # Pauses and ended jobs are saved at once (recovery depends on them); running
        # totals at most every STATE_SAVE_S, which is what a crash can lose.
        if actions or finals or now - self._last_save >= STATE_SAVE_S:
            self._last_save = now
            self.save_state()
        return actions

    def _adopt_frozen(
        self, gpus: list[GpuSample], jobs: dict[int, JobProcesses], job_of_pid: dict[int, int]
    ) -> None:
        """At the first sample that reads the GPUs: a job on them found frozen in its cgroup
        with no pause record (a lost or emptied state file) is taken as paused by this
        agent, so the controller thaws it when its rules say. Only jobs on this node's
        GPUs: the agent never pauses any other, and leaves others' freezes alone."""
        if not self.config.colocation.enabled:  # `show`, or no co-location: never thaws
            self._frozen_scanned = True
            return
        if self.gpu_reader is not None and not gpus:
            return  # the GPUs could not be read: try again at the next sample
        self._frozen_scanned = True
        on_gpus = {job_of_pid[p.pid] for g in gpus for p in g.processes if p.pid in job_of_pid}
        self.coloc.adopt_frozen({j: jobs[j] for j in sorted(on_gpus)})

    def _publish(
        self,
        gpus: list[GpuSample],
        uses: list[JobGpuUse],
        jobs: dict[int, JobProcesses],
        rates: dict[int, float | None],
        described: tuple[GpuProcessInfo, ...],
        host: HostView | None,
        duration_s: float,
    ) -> None:
        """Freeze what this step saw into `snapshot` (one assignment: readers on other
        threads see the previous snapshot or this one, whole)."""
        failing = backlog = None
        if self.sender is not None:
            failing = self.sender.failing_for()
            backlog = len(self.sender.pending()) if failing else 0
        self.snapshot = AgentSnapshot(
            node=self.node,
            taken_at=self.wall(),
            samples_total=self.samples_total,
            last_duration_s=duration_s,
            gpus=tuple(gpus),
            job_gpu=tuple(uses),
            jobs=frozen(
                {
                    job: JobView.of(acc, jobs.get(job), self.node, job in self.coloc.paused, rates)
                    for job, acc in self.accounts.items()
                }
            ),
            gpu_processes=described,
            host=host,
            gpu_energy_total=frozen(self.gpu_energy_total),
            cpu_energy_total=self.cpu_energy_total,
            action_counts=frozen(self.coloc.action_counts),
            eaco_verdicts=frozen(self.coloc.eaco_verdicts),
            error_counts=frozen(self.error_counts),
            warnings=tuple(self._recent),
            report_failing_s=failing,
            report_backlog=backlog,
        )

    def _new_account(self, jp: JobProcesses, wall: float) -> JobAccount:
        acc = JobAccount(
            jp.job_id, wall, wall, cpus_alloc=job_cpus_alloc(jp.placement, self.mounts)
        )
        if self.job_info is None:  # source = "environ": the user's own word, spoofable
            env = job_slurm_env(jp.pids, self.config.proc_root)
            acc.qos, acc.partition = (
                env.get("SLURM_JOB_QOS", ""),
                env.get("SLURM_JOB_PARTITION", ""),
            )
            acc.klass = co.classify(acc.qos, acc.partition, self.coloc.classes)
            log.info(
                "job %s seen: qos=%r partition=%r class=%s (environ)",
                jp.job_id,
                acc.qos,
                acc.partition,
                acc.klass,
            )
        return acc

    def _trusted_info(self, jobs: dict[int, JobProcesses], now: float) -> dict[int, JobInfo] | None:
        """Slurm's QOS/partition of the jobs present (None with source = "environ")."""
        if self.job_info is None:
            return None
        answer = self.job_info.lookup(jobs, now)
        if answer.error is not None:  # logged once per outage by SlurmJobInfo
            self.error_counts["slurm"] = self.error_counts.get("slurm", 0) + 1
        return answer.info

    def _vouched(
        self, jobs: dict[int, JobProcesses], trusted: dict[int, JobInfo]
    ) -> dict[int, JobProcesses]:
        kept, dropped = vouched(jobs, trusted, self.config.proc_root)
        for pid, job_id in dropped:
            self._error(
                "unvouched",
                f"pid {pid} claims job {job_id} by SLURM_JOB_ID but Slurm does not run "
                f"that job on {self.node} under its user: ignored",
            )
        return kept

    def _set_class(self, acc: JobAccount, info: JobInfo | None, new: bool) -> None:
        """Class from Slurm's record, or the default while Slurm has not vouched for the
        job (never the environment); re-evaluated every sample, logged when it changes."""
        qos, part = (info.qos, info.partition) if info is not None else ("", "")
        klass = co.classify(qos, part, self.coloc.classes)  # no answer: the default
        if new or (klass, qos, part) != (acc.klass, acc.qos, acc.partition):
            log.info(
                "job %s: qos=%r partition=%r class=%s (%s)",
                acc.job_id,
                qos,
                part,
                klass,
                "slurm" if info is not None else "default: no answer from Slurm for it",
            )
        acc.klass, acc.qos, acc.partition = klass, qos, part

    def _gpu_energy(self, gpus: list[GpuSample], job_of_pid: dict[int, int], now: float) -> None:
        migs: dict[str, list[GpuSample]] = {}
        for g in gpus:
            if g.parent_uuid:
                migs.setdefault(g.parent_uuid, []).append(g)
        for g in gpus:
            if g.parent_uuid:
                continue
            delta = self.meter.update(g.uuid, now, g.energy_mj, g.power_w)
            self.gpu_energy_total[g.uuid] = self.gpu_energy_total.get(g.uuid, 0.0) + delta
            children = migs.get(g.uuid, [])
            procs = list(g.processes) + [p for m in children for p in m.processes]
            known = g.process_util_known and all(m.process_util_known for m in children)
            weights, _ = gpu_job_weights(procs, job_of_pid, known)
            for job, joules in split(delta, weights).items():
                if job in self.accounts:
                    self.accounts[job].gpu_energy_j += joules

    def _cpu(self, jobs: dict[int, JobProcesses], dt: float) -> None:
        """CPU seconds per job since the last sample, per process so an exiting process
        never makes a job's total go backwards; RAPL energy split by CPU-time share."""
        current = {key: s for jp in jobs.values() for key, s in jp.cpu_by_proc.items()}
        first = self._prev_cpu is None
        prev = self._prev_cpu or {}
        job_delta: dict[int, float] = {}
        for job_id, jp in jobs.items():
            d = 0.0
            for key, s in jp.cpu_by_proc.items():
                base = prev.get(key, s if first else 0.0)
                d += max(0.0, s - base)
            job_delta[job_id] = d
            a = self.accounts[job_id]
            a.cpu_s += d
            a.wall_s += dt
        self._prev_cpu = current
        busy = node_busy_cpu_s(self.config.proc_root)
        busy_delta = None
        if busy is not None and self._prev_node_busy is not None:
            busy_delta = busy - self._prev_node_busy
        self._prev_node_busy = busy
        delta_j = self.rapl.delta_j() if self.rapl is not None else None
        if delta_j is None:
            return
        self.cpu_energy_total += delta_j
        for job, joules in cpu_job_energy(delta_j, job_delta, busy_delta).items():
            self.accounts[job].cpu_energy_j += joules

    def _ended(self, jobs: dict[int, JobProcesses]) -> list[JobReport]:
        ended = [j for j in self.accounts if j not in jobs]
        finals = []
        for job in ended:
            finals.append(self.accounts.pop(job).report(self.node, final=True))
            self.coloc.job_ended(job)
        if ended:
            self.coloc.forget(set(self.accounts))
        return finals

    def _report(self, now: float, finals: list[JobReport]) -> None:
        if self.reports is None:
            return
        due = now - self._last_report >= self.config.report.interval_s
        if not due and not finals:
            return
        reports = list(finals)
        if due:
            self._last_report = now
            reports += [v.report for v in self.snapshot.jobs.values()]
        self.reports.submit(reports)  # spooled and sent by the sender's thread

    # ---- lifecycle ---------------------------------------------------------------------
    def resume_all(self, why: str) -> None:
        """Thaw every job this agent froze (those Slurm cannot vouch for stay recorded in
        the state file for `slurm-ext-agent thaw` or the next start)."""
        self.coloc.resume_all(why)
        self._republish()

    def _republish(self) -> None:
        """The last snapshot with the current pauses and counts (after a shutdown resume,
        or a step that failed)."""
        last = self.snapshot
        jobs = {j: replace(v, paused=j in self.coloc.paused) for j, v in last.jobs.items()}
        self.snapshot = replace(
            last,
            jobs=frozen(jobs),
            action_counts=frozen(self.coloc.action_counts),
            eaco_verdicts=frozen(self.coloc.eaco_verdicts),
            error_counts=frozen(self.error_counts),
            warnings=tuple(self._recent),
        )

    def run(self, stop: threading.Event, once: bool = False) -> None:
        """Loop until `stop`; always leaves no job paused behind it."""
        interval = self.config.interval_s
        try:
            while not stop.is_set():
                started = self.clock()
                try:
                    self.step()
                except Exception:  # a bad sample must not end the agent
                    self.error_counts["step"] = self.error_counts.get("step", 0) + 1
                    log.exception("sample failed")
                    self._republish()
                if once:
                    break
                stop.wait(max(0.0, interval - (self.clock() - started)))
        finally:
            self.resume_all("shutdown")
            self.save_state()
            if self.reports is not None:  # SIGTERM obeyed within a sample, whatever the service
                self.reports.close(min(SHUTDOWN_FLUSH_S, interval / 2))
