"""The agent's co-location controller: it owns the pause state (which jobs this agent
froze, which a previous run left frozen) and carries out what the pure policy
(`slurm_ext.policy.colocation.decide`, shared with the simulator) decides.

A pause is recorded in the state file before the job is frozen (the agent's `save`
callback), and every thaw asks Slurm first whether it suspended the job itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nodeagent.accounts import JobGpuUse
from nodeagent.cgroups import JobProcesses
from nodeagent.config import ColocationConfig
from nodeagent.freezer import JobFreezer, PauseRecord
from nodeagent.jobinfo import SlurmJobInfo
from nodeagent.progress import ProgressReader
from slurm_ext.core.model import JobClasses
from slurm_ext.policy import colocation as co

log = logging.getLogger(__name__)


def make_policy(c: ColocationConfig) -> co.Policy:
    """The decision policy from the `[colocation]` configuration."""
    e = c.eaco
    eaco = (
        co.EacoModel(
            e.gpu_idle_w, e.gpu_max_w, e.opportunistic_power_w, e.predicted_slowdown, e.max_slowdown
        )
        if e.enabled
        else None
    )
    policy = co.Policy(
        slow_fraction=c.slow_fraction,
        memory_high=c.memory_high,
        idle_util=c.idle_util,
        min_solo_util=c.min_solo_util,
        min_solo_rate_samples=c.min_solo_rate_samples,
        eaco=eaco,
    )
    return policy


class ColocationController:
    """Pauses and resumes opportunistic jobs on this node; only ever thaws what it froze.

    `save` writes the agent's state file (False when it could not); `error(source,
    message)` counts and logs a problem once; `job_info` (None with `[jobs] source =
    "environ"`) is asked before a thaw whether Slurm itself suspended the job."""

    def __init__(
        self,
        config: ColocationConfig,
        classes: JobClasses,
        freezer: JobFreezer,
        job_info: SlurmJobInfo | None,
        retry_s: float,
        proc_root: str,
        clock: Callable[[], float],
        wall: Callable[[], float],
        save: Callable[[], bool],
        error: Callable[[str, str], None],
    ) -> None:
        self.config = config
        self.classes, self.policy = classes, make_policy(config)
        self.freezer = freezer
        self.job_info = job_info
        self.retry_s = retry_s
        self.clock, self.wall = clock, wall
        self._save, self._error = save, error
        self.state = co.CoState()
        self.progress = ProgressReader(proc_root, timeout_s=config.progress_timeout_s)
        self.paused: dict[int, PauseRecord] = {}
        self.paused_since: dict[int, float] = {}  # wall time this run froze each job
        self.recovering: set[int] = set()  # left frozen by a previous run, not thawed yet
        self._next_recover = float("-inf")  # retried at most every retry_s
        self.action_counts: dict[tuple[str, str], int] = {}
        # EaCO verdicts by (admitted/refused, learnt/configured inputs); the shell that
        # holds a job kind's history puts its predictions in state.predictions
        self.eaco_verdicts: dict[tuple[str, str], int] = {}

    # ---- recovery and thawing ------------------------------------------------------------
    def adopt(self, records: list[PauseRecord]) -> None:
        """Pauses a previous run recorded: thawed by `recover()` as soon as Slurm allows."""
        for rec in records:
            self.paused[rec.job_id] = rec
            self.recovering.add(rec.job_id)

    def adopt_frozen(self, jobs: dict[int, JobProcesses]) -> None:
        """Jobs found frozen in their cgroups with no pause record (the state file was
        lost): paused by this agent as far as anyone can tell, so kept paused and thawed
        by the co-location rules when due, like a pause of this run. Logged one by one."""
        found = False
        for job, jp in jobs.items():
            rec = None if job in self.paused else self.freezer.frozen(jp)
            if rec is None:
                continue
            found = True
            log.warning(
                "job %s found frozen (%s %s) with no pause record: taken as paused by this "
                "agent, thawed when the co-location rules allow",
                job,
                rec.method,
                ", ".join(rec.targets),
            )
            self.paused[job] = rec
            self.paused_since[job] = self.wall()
        if found:
            self._save()  # recorded now: a crash before the thaw leaves a record

    def recover_due(self, now: float) -> bool:
        return bool(self.recovering) and now >= self._next_recover

    def recover(self, force: bool = False) -> None:
        """Thaw the jobs a previous run left frozen (retried every `retry_s` until Slurm
        can say none of them is suspended by Slurm itself; `force`: thaw regardless)."""
        self._next_recover = self.clock() + self.retry_s
        for job in sorted(self.recovering):
            if self.thaw(job, "recovery", force):
                self._count("resume", "recovery")
        self._save()

    def thaw(self, job: int, why: str, force: bool = False) -> bool:
        """Resume a job this agent froze, unless Slurm suspended it meanwhile (then the
        record is dropped and the job left to Slurm). False: Slurm could not be asked, the
        job stays frozen and its record is kept, to be retried."""
        rec = self.paused.get(job)
        if rec is None:
            return True
        state = ""
        if self.job_info is not None and not force:
            states = self.job_info.states([job])
            if states is None:
                self._error(
                    "thaw", f"job {job} left frozen: Slurm cannot say whether it suspended it"
                )
                return False
            state = states[job]
        del self.paused[job]
        self.paused_since.pop(job, None)
        self.recovering.discard(job)
        if state == "SUSPENDED":
            log.warning("job %s is suspended by Slurm: not thawed, left to Slurm (%s)", job, why)
            return True
        ok = self.freezer.resume(rec)
        log.warning(
            "resumed job %s via %s (%s)%s", job, rec.method, why, "" if ok else ": incomplete"
        )
        return True

    def resume_all(self, why: str) -> None:
        """Thaw every job this agent froze (those Slurm cannot vouch for stay recorded in
        the state file for `slurm-ext-agent thaw` or the next start)."""
        for job in list(self.paused):
            if self.thaw(job, why):
                self._count("resume", why)
        self.state.paused = set(self.paused)

    def job_ended(self, job: int) -> None:
        """The job's processes are gone: nothing Slurm could suspend, so thaw at once."""
        rec = self.paused.pop(job, None)
        self.paused_since.pop(job, None)
        self.recovering.discard(job)
        if rec is not None:
            self.freezer.resume(rec)

    def forget(self, live_jobs: set[int]) -> None:
        co.forget(self.state, live_jobs)
        self.progress.forget(live_jobs)

    # ---- one sample ----------------------------------------------------------------------
    def step(
        self,
        uses: list[JobGpuUse],
        jobs: dict[int, JobProcesses],
        klass: dict[int, str],
    ) -> tuple[list[co.Action], dict[int, float | None]]:
        """Decide and enforce for one sample; returns the actions and the progress rates
        read (guaranteed jobs only). `klass`: each present job's class."""
        if not self.config.enabled:
            return [], {}
        rates = self._progress_rates(uses, jobs, klass)
        by_gpu: dict[str, list[JobGpuUse]] = {}
        for u in uses:
            by_gpu.setdefault(u.gpu.uuid, []).append(u)
        views = []
        for group in by_gpu.values():
            g = group[0].gpu
            frac = None
            if g.memory_used_bytes is not None and g.memory_total_bytes:
                frac = g.memory_used_bytes / g.memory_total_bytes
            on_gpu = tuple(
                co.JobOnGpu(u.job_id, klass[u.job_id], u.util, rates.get(u.job_id)) for u in group
            )
            views.append(co.GpuView(g.uuid, on_gpu, frac, g.power_w))
        self.state.paused = set(self.paused)
        judged = set(self.state.verdict_source)
        actions = co.decide(views, self.state, self.policy)
        for job in set(self.state.verdict_source) - judged:
            verdict = "admitted" if job in self.state.admitted else "refused"
            key = (verdict, self.state.verdict_source[job])
            self.eaco_verdicts[key] = self.eaco_verdicts.get(key, 0) + 1
        for a in actions:
            self._enforce(a, jobs)
        return actions, rates

    def _progress_rates(
        self, uses: list[JobGpuUse], jobs: dict[int, JobProcesses], klass: dict[int, str]
    ) -> dict[int, float | None]:
        """Progress rates of the guaranteed jobs on GPUs (only theirs are ever judged)."""
        if not self.config.progress:
            return {}
        now = self.wall()
        rates: dict[int, float | None] = {}
        for u in uses:
            job = u.job_id
            if job in rates or job not in jobs or klass[job] != co.GUARANTEED:
                continue
            rates[job] = self.progress.rate(job, jobs[job].cpu_by_proc, now)
        return rates

    def _enforce(self, action: co.Action, jobs: dict[int, JobProcesses]) -> None:
        self._count(action.kind, action.code)
        if action.kind != "pause":
            self.thaw(action.job_id, action.reason)
            return
        jp = jobs.get(action.job_id)
        if jp is None:
            return
        try:
            rec = self.freezer.pause(jp, before=self._record_pause)
        except OSError as exc:
            self._error("state", str(exc))
            return
        self.paused[action.job_id] = rec
        self.paused_since[action.job_id] = self.wall()  # reported: the service requeues long pauses
        log.warning(
            "paused opportunistic job %s on %s via %s: %s",
            action.job_id,
            action.gpu,
            rec.method,
            action.reason,
        )

    def _record_pause(self, rec: PauseRecord) -> None:
        """Called by the freezer before it freezes: the record must be on disk first."""
        self.paused[rec.job_id] = rec
        if not self._save():
            del self.paused[rec.job_id]
            raise OSError(f"cannot record the pause of job {rec.job_id}: not freezing it")

    def _count(self, kind: str, code: str) -> None:
        key = (kind, code)
        self.action_counts[key] = self.action_counts.get(key, 0) + 1
