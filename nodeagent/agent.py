"""The node agent loop: sample, map processes to jobs, attribute energy, enforce
co-location, report, persist. Each part is an adapter or a pure function; this module
only wires them and keeps the per-job running totals.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.accounts import JobAccount
from nodeagent.cgroups import (
    CgroupMounts,
    JobFreezer,
    JobProcesses,
    JobScanner,
    PauseRecord,
    job_cpus_alloc,
    job_slurm_env,
    node_busy_cpu_s,
    read_mounts,
)
from nodeagent.config import AgentConfig
from nodeagent.energy import GpuEnergyMeter, RaplReader, cpu_job_energy, gpu_job_weights, split
from nodeagent.gpu import GpuReader, GpuSample, GpuUnavailable
from nodeagent.jobinfo import JobInfo, SlurmJobInfo, vouched
from nodeagent.progress import ProgressReader
from nodeagent.report import JobReport, ReportSender
from nodeagent.state import STATE_VERSION, read_state, restore_totals, write_state
from slurm_ext.policy import colocation as co
from slurm_ext.slurm.cli_backend import CliSlurmClient
from slurm_ext.slurm.client import SlurmClient

log = logging.getLogger(__name__)
STATE_SAVE_S = 30.0


@dataclass(frozen=True)
class JobGpuUse:
    job_id: int
    gpu: GpuSample
    util: float | None
    memory_bytes: int


class Agent:
    """One node's agent. `step()` is one sample; `run()` loops until `stop` is set."""

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
    ) -> None:
        """`slurm`: the client asked for job classes when `[jobs] source = "slurm"`
        (default: `CliSlurmClient` from `[jobs]`)."""
        self.config = config
        self.node = config.node_name or socket.gethostname().split(".")[0]
        self.gpu_reader = gpu_reader
        self.rapl = rapl
        self.sender = sender
        self.mounts = mounts if mounts is not None else read_mounts()
        self.freezer = JobFreezer(self.mounts, config.proc_root)
        self.scanner = JobScanner(config.proc_root)
        self.clock = clock
        self.wall = wall
        j = config.jobs
        self.job_info: SlurmJobInfo | None = None  # None: classes from the environment
        if j.source == "slurm":
            client = slurm or CliSlurmClient(slurm_conf=j.slurm_conf, timeout=j.timeout_s)
            self.job_info = SlurmJobInfo(client, self.node, j.cache_s)
        c = config.colocation
        self.rules = co.ClassRules(
            tuple(c.guaranteed_qos),
            tuple(c.opportunistic_qos),
            tuple(c.guaranteed_partitions),
            tuple(c.opportunistic_partitions),
            c.default_class,
        )
        e = c.eaco
        self.policy = co.Policy(
            slow_fraction=c.slow_fraction,
            memory_high=c.memory_high,
            idle_util=c.idle_util,
            min_solo_util=c.min_solo_util,
            min_solo_rate_samples=c.min_solo_rate_samples,
            eaco=co.EacoModel(
                e.gpu_idle_w,
                e.gpu_max_w,
                e.opportunistic_power_w,
                e.predicted_slowdown,
                e.max_slowdown,
            )
            if e.enabled
            else None,
        )
        self.lock = threading.Lock()  # the exporter reads under it
        self.meter = GpuEnergyMeter()
        self.co_state = co.CoState()
        self.progress = ProgressReader(config.proc_root, timeout_s=c.progress_timeout_s)
        self.accounts: dict[int, JobAccount] = {}
        self.paused: dict[int, PauseRecord] = {}
        self._recovering: set[int] = set()  # left frozen by a previous run, not thawed yet
        self._next_recover = float("-inf")  # retried at most every jobs.cache_s
        self.gpu_energy_total: dict[str, float] = {}
        self.cpu_energy_total = 0.0
        self.action_counts: dict[tuple[str, str], int] = {}
        # EaCO verdicts by (admitted/refused, learnt/configured inputs); the shell that
        # holds a job kind's history puts its predictions in co_state.predictions
        self.eaco_verdicts: dict[tuple[str, str], int] = {}
        self.error_counts: dict[str, int] = {}
        self.samples_total = 0
        self.last_duration_s = 0.0
        # latest sample, for the exporter and `show`
        self.gpus: list[GpuSample] = []
        self.job_gpu: list[JobGpuUse] = []
        self.jobs: dict[int, JobProcesses] = {}
        self._last_t: float | None = None
        self._last_report = -1e18
        self._last_save = -1e18
        self._prev_cpu: dict[tuple[int, int], float] | None = None
        self._prev_node_busy: float | None = None
        self._warned: set[str] = set()
        self._load_state()

    # ---- state -------------------------------------------------------------------------
    def _load_state(self) -> None:
        """Restore totals, and thaw every job a previous run left frozen. A damaged file
        never stops this: each part that cannot be read is logged and skipped."""
        if not self.config.state_file:
            return
        path = Path(self.config.state_file)
        loaded = read_state(path)
        if loaded is None:
            return
        for problem in loaded.problems:
            log.error("state file %s: %s", path, problem)
        for rec in loaded.paused:  # first: nothing below may keep a job frozen
            self.paused[rec.job_id] = rec
            self._recovering.add(rec.job_id)
        doc = loaded.doc if loaded.doc.get("version") == STATE_VERSION else {}
        self.gpu_energy_total, self.cpu_energy_total = restore_totals(
            doc, path, self.accounts, self.co_state
        )
        if self._recovering:
            self.recover()

    def recover(self, force: bool = False) -> None:
        """Thaw the jobs a previous run left frozen (retried every sample until Slurm
        can say none of them is suspended by Slurm itself; `force`: thaw regardless)."""
        self._next_recover = self.clock() + self.config.jobs.cache_s
        for job in sorted(self._recovering):
            if self._thaw(job, "recovery", force):
                self._count_action("resume", "recovery")
        self.save_state()

    def _thaw(self, job: int, why: str, force: bool = False) -> bool:
        """Resume a job this agent froze, unless Slurm suspended it meanwhile (then the
        record is dropped and the job left to Slurm). False: Slurm could not be asked, the
        job stays frozen and its record is kept, to be retried."""
        rec = self.paused.get(job)
        if rec is None:
            return True
        state = "" if self.job_info is None or force else None
        if state is None:
            assert self.job_info is not None
            states = self.job_info.states([job])
            if states is None:
                self._error(
                    "thaw", f"job {job} left frozen: Slurm cannot say whether it suspended it"
                )
                return False
            state = states[job]
        del self.paused[job]
        self._recovering.discard(job)
        if job in self.accounts:
            self.accounts[job].paused_since = None
        if state == "SUSPENDED":
            log.warning("job %s is suspended by Slurm: not thawed, left to Slurm (%s)", job, why)
            return True
        ok = self.freezer.resume(rec)
        log.warning(
            "resumed job %s via %s (%s)%s", job, rec.method, why, "" if ok else ": incomplete"
        )
        return True

    def _record_pause(self, rec: PauseRecord) -> None:
        """Called by the freezer before it freezes: the record must be on disk first."""
        self.paused[rec.job_id] = rec
        if not self.save_state():
            del self.paused[rec.job_id]
            raise OSError(f"cannot record the pause of job {rec.job_id}: not freezing it")

    def save_state(self) -> bool:
        if not self.config.state_file:
            return True
        path = Path(self.config.state_file)
        doc = {
            "paused": [r.to_dict() for r in self.paused.values()],
            "version": STATE_VERSION,
            "saved_at": self.wall(),
            "accounts": [
                dict(vars(a), gpu_uuids=list(a.gpu_uuids)) for a in self.accounts.values()
            ],
            "gpu_energy_total": self.gpu_energy_total,
            "cpu_energy_total": self.cpu_energy_total,
            "solo_util": {str(k): v for k, v in self.co_state.solo_util.items()},
            "solo_rate": {str(k): v for k, v in self.co_state.solo_rate.items()},
            "solo_rate_n": {str(k): v for k, v in self.co_state.solo_rate_n.items()},
            "eaco_admitted": sorted(self.co_state.admitted),
            "eaco_refused": {str(k): v for k, v in self.co_state.refused.items()},
        }
        try:
            write_state(path, doc)
            return True
        except OSError as exc:
            self._error("state", f"cannot write state file {path}: {exc}")
            return False

    # ---- helpers -----------------------------------------------------------------------
    def _error(self, source: str, message: str) -> None:
        self.error_counts[source] = self.error_counts.get(source, 0) + 1
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def _count_action(self, kind: str, code: str) -> None:
        key = (kind, code)
        self.action_counts[key] = self.action_counts.get(key, 0) + 1

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
        if self._recovering and now >= self._next_recover:
            with self.lock:
                self.recover()
        gpus = self._read_gpus()
        gpu_pids = {p.pid for g in gpus for p in g.processes}
        jobs = self.scanner.scan(gpu_pids)
        trusted = self._trusted_info(jobs, now)  # may call squeue: outside the lock
        if trusted is not None:
            jobs = self._vouched(jobs, trusted)
        job_of_pid = {pid: j for j, jp in jobs.items() for pid in jp.pids}
        with self.lock:
            for job_id, jp in jobs.items():
                new = job_id not in self.accounts
                if new:
                    self.accounts[job_id] = self._new_account(jp, wall)
                self.accounts[job_id].last_seen = wall
                if trusted is not None:
                    self._set_class(self.accounts[job_id], trusted.get(job_id), new)
            self._gpu_energy(gpus, job_of_pid, now)
            uses = self._job_gpu_use(gpus, job_of_pid)
            self._account_gpu(uses, dt)
            self._cpu(jobs, dt)
            actions = self._colocate(uses, jobs)
            finals = self._ended(jobs)
            self.gpus, self.job_gpu, self.jobs = gpus, uses, jobs
            self.samples_total += 1
        self._report(now, finals)
        # Pauses and ended jobs are saved at once (recovery depends on them); running
        # totals at most every STATE_SAVE_S, which is what a crash can lose.
        if actions or finals or now - self._last_save >= STATE_SAVE_S:
            self._last_save = now
            self.save_state()
        self.last_duration_s = time.process_time() - t0
        return actions

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
            acc.klass = co.classify(acc.qos, acc.partition, self.rules)
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
        klass = co.classify(qos, part, self.rules)  # no answer: the default
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

    def _job_gpu_use(self, gpus: list[GpuSample], job_of_pid: dict[int, int]) -> list[JobGpuUse]:
        """Each job's utilisation and memory on each device it has processes on. Without
        per-process utilisation, a job alone (others paused or absent) gets the GPU's."""
        uses = []
        for g in gpus:
            per_job: dict[int, tuple[float, int]] = {}
            for p in g.processes:
                job = job_of_pid.get(p.pid)
                if job is None:
                    continue
                u, m = per_job.get(job, (0.0, 0))
                per_job[job] = (u + (p.sm_util or 0.0), m + (p.used_memory_bytes or 0))
            running = [j for j in per_job if j not in self.paused]
            for job, (u, m) in sorted(per_job.items()):
                if g.process_util_known:
                    util: float | None = min(1.0, u)
                elif running == [job] and g.util is not None:
                    util = g.util
                elif job in self.paused:
                    util = 0.0
                else:
                    util = None
                uses.append(JobGpuUse(job, g, util, m))
        return uses

    def _account_gpu(self, uses: list[JobGpuUse], dt: float) -> None:
        mem_now: dict[int, int] = {}
        for u in uses:
            a = self.accounts.get(u.job_id)
            if a is None:
                continue
            a.gpu_seconds += dt
            if u.util is not None:
                a.util_seconds += dt
                a.util_weighted += u.util * dt
                a.util_peak = max(a.util_peak, u.util)
            mem_now[u.job_id] = mem_now.get(u.job_id, 0) + u.memory_bytes
            if u.gpu.uuid not in a.gpu_uuids:
                a.gpu_uuids.append(u.gpu.uuid)
            a.gpu_type = a.gpu_type or u.gpu.name
        for job, m in mem_now.items():
            a = self.accounts[job]
            a.mem_peak_bytes = max(a.mem_peak_bytes, m)
            a.samples += 1

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

    def _colocate(self, uses: list[JobGpuUse], jobs: dict[int, JobProcesses]) -> list[co.Action]:
        if not self.config.colocation.enabled:
            return []
        by_gpu: dict[str, list[JobGpuUse]] = {}
        for u in uses:
            by_gpu.setdefault(u.gpu.uuid, []).append(u)
        rates = self._progress_rates(uses, jobs)
        views = []
        for group in by_gpu.values():
            g = group[0].gpu
            frac = None
            if g.memory_used_bytes is not None and g.memory_total_bytes:
                frac = g.memory_used_bytes / g.memory_total_bytes
            views.append(
                co.GpuView(
                    g.uuid,
                    tuple(
                        co.JobOnGpu(
                            u.job_id, self.accounts[u.job_id].klass, u.util, rates.get(u.job_id)
                        )
                        for u in group
                    ),
                    frac,
                    g.power_w,
                )
            )
        self.co_state.paused = set(self.paused)
        judged = set(self.co_state.verdict_source)
        actions = co.decide(views, self.co_state, self.policy)
        for job in set(self.co_state.verdict_source) - judged:
            verdict = "admitted" if job in self.co_state.admitted else "refused"
            key = (verdict, self.co_state.verdict_source[job])
            self.eaco_verdicts[key] = self.eaco_verdicts.get(key, 0) + 1
        for a in actions:
            self._enforce(a, jobs)
        return actions

    def _progress_rates(
        self, uses: list[JobGpuUse], jobs: dict[int, JobProcesses]
    ) -> dict[int, float | None]:
        """Progress rates of the guaranteed jobs on GPUs (only theirs are ever judged)."""
        if not self.config.colocation.progress:
            return {}
        now = self.wall()
        rates: dict[int, float | None] = {}
        for u in uses:
            job = u.job_id
            if job in rates or job not in jobs or self.accounts[job].klass != co.GUARANTEED:
                continue
            rates[job] = self.progress.rate(job, jobs[job].cpu_by_proc, now)
        return rates

    def _enforce(self, action: co.Action, jobs: dict[int, JobProcesses]) -> None:
        self._count_action(action.kind, action.code)
        if action.kind == "pause":
            jp = jobs.get(action.job_id)
            if jp is None:
                return
            try:
                rec = self.freezer.pause(jp, before=self._record_pause)
            except OSError as exc:
                self._error("state", str(exc))
                return
            self.paused[action.job_id] = rec
            if action.job_id in self.accounts:  # reported: the service requeues long pauses
                self.accounts[action.job_id].paused_since = self.wall()
            log.warning(
                "paused opportunistic job %s on %s via %s: %s",
                action.job_id,
                action.gpu,
                rec.method,
                action.reason,
            )
        else:
            self._thaw(action.job_id, action.reason)

    def _ended(self, jobs: dict[int, JobProcesses]) -> list[JobReport]:
        ended = [j for j in self.accounts if j not in jobs]
        finals = []
        for job in ended:
            a = self.accounts.pop(job)
            finals.append(a.report(self.node, final=True))
            rec = self.paused.pop(job, None)
            self._recovering.discard(job)
            if rec is not None:  # its processes are gone: nothing Slurm could suspend
                self.freezer.resume(rec)
        if ended:
            co.forget(self.co_state, set(self.accounts))
            self.progress.forget(self.accounts)
        return finals

    def _report(self, now: float, finals: list[JobReport]) -> None:
        if self.sender is None:
            return
        due = now - self._last_report >= self.config.report.interval_s
        if not due and not finals:
            return
        reports = list(finals)
        if due:
            self._last_report = now
            with self.lock:
                reports += [a.report(self.node, final=False) for a in self.accounts.values()]
        try:
            self.sender.send(reports)
        except OSError as exc:
            self._error("report", f"report spool: {exc}")

    # ---- lifecycle ---------------------------------------------------------------------
    def resume_all(self, why: str) -> None:
        """Thaw every job this agent froze (those Slurm cannot vouch for stay recorded in
        the state file for `slurm-ext-agent thaw` or the next start)."""
        with self.lock:
            for job in list(self.paused):
                if self._thaw(job, why):
                    self._count_action("resume", why)
            self.co_state.paused = set(self.paused)

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
                if once:
                    break
                stop.wait(max(0.0, interval - (self.clock() - started)))
        finally:
            self.resume_all("shutdown")
            self.save_state()
            if self.sender is not None:
                self.sender.flush()
