"""The priority service: snapshot Slurm, rank with the policy core, write back the diff.

A thin shell. Each pass: read jobs and nodes through the SlurmClient, fold them into the
store's attained-service records (restart-safe: a stint's start comes from Slurm's own
StartTime), rank with `slurm_ext.policy.rank` (the same function the simulator calls),
turn the order into priority values with `writeback.assign_values`, and write only the
jobs whose value, placement or run state must change.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from slurm_ext.config import choices
from slurm_ext.hints import parse_hints
from slurm_ext.model import Decision, Job, JobState, JobView, Node
from slurm_ext.policy import PolicyConfig, network_sensitive, place, rank
from slurm_ext.policy.placement import consolidate_for
from slurm_ext.policy.preemption import RunningJob, WaitingJob, choose_victims
from slurm_ext.predict.from_store import PeriodicRebuild, PredictorServiceConfig
from slurm_ext.slurm.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.slurm.history import sacct_completions
from slurm_ext.store import DecisionRecord, JobRecord, Store
from slurm_ext.writeback import assign_values, changed

log = logging.getLogger("slurm_ext.service")

ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
TERMINAL = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
)


@dataclass
class SlurmSection:
    """How to reach Slurm. backend: auto (pyslurm if it matches the running Slurm, else
    the CLI), pyslurm, or cli. slurm_conf: path to slurm.conf (default: Slurm's own).
    timeout_s: bound on every Slurm call."""

    backend: str = choices("auto", "pyslurm", "cli", default="auto")
    slurm_conf: str | None = None
    timeout_s: float = 30.0


@dataclass
class ServiceConfig:
    """`service.toml`. See etc/service.toml for every key with its meaning."""

    interval_s: float = 30.0
    store: str = "/var/lib/slurm-ext/service.db"
    mode: str = choices("site_factor", "priority", default="site_factor")
    partitions: list[str] = field(default_factory=list)  # empty: every partition
    value_min: int = 1
    value_max: int = 1_000_000
    placement: bool = False
    placement_mode: str = choices("consolidate", "spread", "profile", default="profile")
    preemption: str = choices("off", "requeue", default="off")
    max_requeues_per_pass: int = 2
    listen: str = "127.0.0.1"
    port: int = 9788  # metrics and agent reports; 0 disables the listener
    report_secret_file: str | None = None
    backoff_max_s: float = 300.0
    # Completed-job history for the Gittins distribution, beyond what the service saw:
    # "auto" imports sacct's when accounting answers (else uses the store alone, logged
    # once), "sacct" insists (errors logged every refresh), "store" never asks sacct.
    history_source: str = choices("auto", "sacct", "store", default="auto")
    sacct_days: float = 30.0
    sacct_refresh_s: float = 3600.0
    slurm: SlurmSection = field(default_factory=SlurmSection)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    predictor: PredictorServiceConfig = field(default_factory=PredictorServiceConfig)

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        if not 1 <= self.value_min < self.value_max <= 4_000_000_000:
            raise ValueError("need 1 <= value_min < value_max <= 4000000000")
        if self.mode == "site_factor" and self.value_max > 2_000_000_000:
            raise ValueError("value_max must be <= 2000000000 in site_factor mode")
        if self.policy.oracle:
            raise ValueError(
                f"policy.policy = {self.policy.policy!r} is a simulator-only oracle "
                "(it reads true job durations); use gittins, las, fifo or multifactor"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be 0..65535")
        if self.listen not in ("127.0.0.1", "::1", "localhost") and not self.report_secret_file:
            raise ValueError("listening beyond loopback needs report_secret_file")


@dataclass
class PassResult:
    started_at: float
    duration_s: float = 0.0
    ranked: int = 0
    writes: int = 0
    errors: int = 0
    requeued: list[int] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    planned: dict[int, int] = field(default_factory=dict)  # job -> value to write
    placements: dict[int, tuple[str, ...]] = field(default_factory=dict)


# ---- pure pieces ----------------------------------------------------------------------


def fold_jobs(
    records: dict[int, JobRecord],
    jobs: Sequence[Job],
    now: float,
    promoted: Collection[int] = (),
) -> tuple[dict[int, JobRecord], list[tuple[int, float, float, float]]]:
    """Advance attained-service records with a fresh snapshot.

    `promoted`: jobs the starvation guard had promoted while they waited; a stint one of
    them starts counts its queue from the service it had then (as the simulator does).

    Returns the updated records (done ones included, marked) and completions
    (job_id, gpu_s, run_s, end_time) for the Gittins history. A stint's start is
    Slurm's StartTime, so a service restart loses nothing of a running stint.
    """
    out: dict[int, JobRecord] = {}
    completions: list[tuple[int, float, float, float]] = []
    seen: set[int] = set()
    for job in jobs:
        seen.add(job.job_id)
        prev = records.get(job.job_id)
        if prev is not None and prev.done:
            continue
        if prev is None:
            prev = JobRecord(
                job_id=job.job_id,
                user=job.user,
                partition=job.partition,
                name=job.name,
                model_tag=parse_hints(job.comment).model,
                gpus=job.gpus,
                submit_time=job.submit_time,
                closed_gpu_s=0.0,
                closed_run_s=0.0,
                last_run_s=0.0,
                run_start=None,
                waiting_since=job.submit_time or now,
                last_seen=now,
                state="PENDING",
                done=False,
            )
        gpus = job.gpus or prev.gpus
        closed_gpu, closed_run, last_run = prev.closed_gpu_s, prev.closed_run_s, prev.last_run_s
        run_start, waiting = prev.run_start, prev.waiting_since
        promoted_at = prev.promoted_at_gpu_s
        state = job.state
        terminal = state.value in TERMINAL

        def close(end: float, gpus: int = gpus) -> None:
            nonlocal closed_gpu, closed_run, last_run, run_start, promoted_at
            closed_gpu, closed_run, last_run = _stint(closed_gpu, closed_run, run_start, end, gpus)
            run_start = None
            promoted_at = None

        if state in (JobState.RUNNING, JobState.COMPLETING):
            start = job.start_time or now
            if run_start is None:
                # fresh start (Slurm's StartTime is exact) or resume from suspend (now)
                run_start = start if prev.state != "SUSPENDED" else now
                waiting = None
                if job.job_id in promoted and prev.state != "SUSPENDED":
                    promoted_at = closed_gpu
            elif start > run_start + 1 and prev.state != "SUSPENDED":
                # requeued and restarted between two passes: close the old stint
                close(min(prev.last_seen, start))
                run_start, waiting = start, None
        elif run_start is not None:
            if terminal:
                close(job.end_time or prev.last_seen)
            elif state == JobState.SUSPENDED:
                close(now)
            else:  # back to pending: requeued or preempted
                close(prev.last_seen)
                waiting = now
        if terminal and closed_gpu > 0:
            completions.append((job.job_id, closed_gpu, closed_run, job.end_time or now))
        out[job.job_id] = JobRecord(
            job_id=prev.job_id,
            user=prev.user,
            partition=job.partition,
            name=prev.name,
            model_tag=prev.model_tag,
            gpus=gpus,
            submit_time=prev.submit_time,
            closed_gpu_s=closed_gpu,
            closed_run_s=closed_run,
            last_run_s=last_run,
            run_start=run_start,
            waiting_since=waiting,
            last_seen=now,
            state=state.value,
            done=terminal,
            promoted_at_gpu_s=promoted_at,
        )
    for job_id, rec in records.items():
        if job_id in seen or rec.done:
            continue
        # gone from Slurm (purged after MinJobAge, or finished while we were down)
        if rec.run_start is not None:
            rec = _close(rec, rec.last_seen)
        if rec.closed_gpu_s > 0:
            completions.append((job_id, rec.closed_gpu_s, rec.closed_run_s, rec.last_seen))
        out[job_id] = replace(rec, done=True, state="GONE")
    return out, completions


def _persisted(rec: JobRecord | None) -> tuple | None:
    """The fields a pass can change, but last_seen (bumped every pass, not persisted each time)."""
    if rec is None:
        return None
    return (
        rec.state,
        rec.run_start,
        rec.waiting_since,
        rec.closed_gpu_s,
        rec.gpus,
        rec.partition,
        rec.done,
        rec.promoted_at_gpu_s,
    )


def _decision_key(d: DecisionRecord) -> tuple:
    return (d.rank, d.queue, d.gittins, d.promoted, d.reason, d.value, d.mode, d.placement)


def _stint(
    closed_gpu: float, closed_run: float, start: float | None, end: float, gpus: int
) -> tuple[float, float, float]:
    """Close a run stint: (GPU-seconds, run seconds so far, the stint's length)."""
    assert start is not None
    run = max(0.0, end - start)
    return closed_gpu + run * gpus, closed_run + run, run


def _close(rec: JobRecord, end: float) -> JobRecord:
    gpu_s, run_s, last = _stint(rec.closed_gpu_s, rec.closed_run_s, rec.run_start, end, rec.gpus)
    return replace(
        rec,
        closed_gpu_s=gpu_s,
        closed_run_s=run_s,
        last_run_s=last,
        run_start=None,
        promoted_at_gpu_s=None,
    )


def job_view(job: Job, rec: JobRecord, now: float) -> JobView:
    return JobView(
        job_id=job.job_id,
        gpus=max(1, job.gpus),
        submit_time=job.submit_time,
        attained_gpu_s=rec.attained_gpu_s(now),
        executed_s=rec.executed_s(now),
        running=job.running,
        # the policy reads the current stint for a running job, the last one for a waiting job
        last_run_s=(now - rec.run_start) if rec.run_start is not None else rec.last_run_s,
        waiting_since=rec.waiting_since,
        user=job.user,
        partition=job.partition,
        model_tag=rec.model_tag,
        promoted_at_gpu_s=rec.promoted_at_gpu_s if job.running else None,
    )


def preemption_victims(
    decisions: Sequence[Decision],
    by_id: dict[int, Job],
    nodes: Sequence[Node],
    pins: Collection[int],
    now: float,
    policy: PolicyConfig,
    placement_mode: str,
) -> tuple[int | None, list[int]]:
    """The best waiting job and the running jobs to requeue for it, worst first.

    Eligible: Slurm may requeue it (--requeue) and it opted in (`checkpoint=1`), not
    pinned, past min_run_s. A running job's GPUs per node: its per-node request, else its
    GPUs spread evenly over its nodes (Slurm's JSON carries no per-node split).
    """
    waiting = [d for d in decisions if by_id[d.job_id].pending and not by_id[d.job_id].held]
    if not waiting:
        return None, []
    top, top_rank = by_id[waiting[0].job_id], waiting[0].rank
    free = {n.name: n.gpus_free for n in nodes if n.schedulable}
    below = []
    for d in reversed(decisions):
        job = by_id[d.job_id]
        if d.rank <= top_rank or not job.running:
            continue
        below.append(
            RunningJob(
                job.job_id,
                tuple((n, g) for n, g in _per_node(job) if n in free),
                job.requeue and parse_hints(job.comment).checkpoint,
                now - (job.start_time if job.start_time is not None else now),
                job.job_id in pins,
            )
        )
    model = parse_hints(top.comment).model
    want = WaitingJob(
        top.job_id, top.gpus, consolidate_for(placement_mode, network_sensitive(model))
    )
    capacity = max((n.gpus for n in nodes), default=0)
    return top.job_id, choose_victims(want, below, free, capacity, policy.min_run_s)


def _per_node(job: Job) -> list[tuple[str, int]]:
    if not job.nodes:
        return []
    if job.gpus_per_node:
        return [(n, job.gpus_per_node) for n in job.nodes]
    share, extra = divmod(job.gpus, len(job.nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(job.nodes)]


def plan_placements(
    ranked_pending: Sequence[Job], nodes: Sequence[Node], mode: str
) -> dict[int, tuple[str, ...] | None]:
    """Node sets for pending jobs that can start now, in rank order; None: no hint.

    Only per-job GPU requests (--gpus=N) and single-node jobs get hints: rewriting the
    node count of a per-node request would change how many GPUs it gets.
    """
    free = {n.name: n for n in nodes if n.schedulable}
    out: dict[int, tuple[str, ...] | None] = {}
    for job in ranked_pending:
        if job.gpus <= 0:
            continue
        cands = place(
            job.job_id,
            job.gpus,
            list(free.values()),
            mode=mode,
            model_tag=parse_hints(job.comment).model,
        )
        hintable = job.gpus > 1 and (job.gpus_per_node == 0 or job.num_nodes == 1)
        if not cands:
            out[job.job_id] = None
            continue
        best = cands[0]
        out[job.job_id] = best.nodes if hintable else None
        need = job.gpus
        for name in best.nodes:  # take the GPUs so later jobs see what is left
            n = free[name]
            take = min(n.gpus_free, need)
            free[name] = replace(n, gpus_alloc=n.gpus_alloc + take)
            need -= take
    return out


# ---- the shell ----------------------------------------------------------------------


class Service:
    def __init__(
        self,
        config: ServiceConfig,
        client: SlurmClient,
        store: Store,
        dry_run: bool = False,
        metrics=None,
    ) -> None:
        self.config = config
        self.client = client
        self.store = store
        self.dry_run = dry_run
        self.metrics = metrics
        self._stop = threading.Event()
        self.failures = 0
        # in-memory copies of the store's tables; the store is written only where they change
        self._next_sacct = 0.0
        self._promoted: set[int] = set()  # waiting jobs the last pass promoted
        self._records: dict[int, JobRecord] | None = None
        self._decisions: dict[int, DecisionRecord] | None = None

    def _load(self) -> tuple[dict[int, JobRecord], dict[int, DecisionRecord]]:
        if self._records is None or self._decisions is None:
            last = self.store.last_pass()
            seen_at = last["started_at"] if last else 0.0
            # every active job in the store was seen at the last pass (last_seen is not
            # persisted each pass: it would rewrite every row)
            self._records = {
                j: replace(r, last_seen=max(r.last_seen, seen_at))
                for j, r in self.store.jobs().items()
            }
            self._decisions = self.store.decisions()
        return self._records, self._decisions

    def managed(self, job: Job) -> bool:
        return not self.config.partitions or job.partition in self.config.partitions

    def run_pass(self, now: float | None = None) -> PassResult:
        t0 = time.monotonic()
        now = time.time() if now is None else now
        res = PassResult(started_at=now)
        self._import_history(now)
        jobs = self.client.jobs(states=ACTIVE + TERMINAL)
        nodes = self.client.nodes()
        old_records, stored = self._load()
        records, completions = fold_jobs(old_records, jobs, now, self._promoted)
        self.store.save_jobs(
            [r for j, r in records.items() if _persisted(r) != _persisted(old_records.get(j))],
            completions,
        )
        self._records = {j: r for j, r in records.items() if not r.done}
        history = self.store.history(self.config.policy.history_window)
        active = [j for j in jobs if j.state.active and self.managed(j)]
        views = [job_view(j, records[j.job_id], now) for j in active]
        decisions = rank(views, now, self.config.policy, history or None)
        res.decisions, res.ranked = decisions, len(decisions)
        self._promoted = {d.job_id for d in decisions if d.promoted}
        by_id = {j.job_id: j for j in active}
        pins = self.store.pins()
        targets = [
            by_id[d.job_id]
            for d in decisions
            if by_id[d.job_id].pending and not by_id[d.job_id].held and d.job_id not in pins
        ]
        current = self._current_values(targets, stored)
        desired = assign_values(
            [j.job_id for j in targets], current, self.config.value_min, self.config.value_max
        )
        res.planned = changed(desired, current)
        placements: dict[int, tuple[str, ...] | None] = {}
        if self.config.placement:
            placements = plan_placements(targets, nodes, self.config.placement_mode)
        written: dict[int, int | None] = {
            j: (stored[j].value if j in stored else None) for j in by_id
        }
        placed: dict[int, tuple[str, ...] | None] = {
            j: (stored[j].placement if j in stored else None) for j in by_id
        }
        if not self.dry_run:
            try:
                written.update(self._write_values(res, res.planned))
                for job_id, nodes_ in placements.items():
                    if nodes_ != placed.get(job_id) and self._write(
                        res, self._set_placement, job_id, nodes_
                    ):
                        placed[job_id] = nodes_
                if self.config.preemption == "requeue":
                    self._preempt(res, decisions, by_id, nodes, pins)
            except SlurmUnavailable as exc:
                # the rest would each wait for the same timeout; what was not recorded
                # as written is written again next pass (same values: harmless)
                res.errors += 1
                log.warning("slurmctld stopped answering; writes resume next pass: %s", exc)
        res.placements = {j: p for j, p in placements.items() if p}
        fresh: dict[int, DecisionRecord] = {}
        for d in decisions:
            rec = DecisionRecord(
                job_id=d.job_id,
                rank=d.rank,
                queue=d.queue,
                gittins=d.index,
                promoted=d.promoted,
                reason=d.reason,
                value=written.get(d.job_id),
                mode=self.config.mode,
                placement=placed.get(d.job_id),
                decided_at=now,
            )
            old = stored.get(d.job_id)
            same = old is not None and _decision_key(old) == _decision_key(rec)
            fresh[d.job_id] = old if same else rec
        self.store.save_decisions(
            [r for j, r in fresh.items() if r is not stored.get(j)],
            drop=[j for j in stored if j not in fresh],
        )
        self._decisions = fresh
        res.duration_s = time.monotonic() - t0
        self.store.record_pass(
            now, res.duration_s, res.ranked, res.writes, res.errors, self.dry_run
        )
        if self.metrics is not None:
            self.metrics.observe_pass(res, decisions)
        log.info(
            "pass: %d jobs ranked, %d writes%s, %d errors, %d requeued, %.3fs",
            res.ranked,
            res.writes if not self.dry_run else len(res.planned),
            " (dry run, not written)" if self.dry_run else "",
            res.errors,
            len(res.requeued),
            res.duration_s,
        )
        return res

    def _import_history(self, now: float) -> None:
        """Refresh completions from sacct when due; never fails the pass."""
        source = self.config.history_source
        if source == "store" or now < self._next_sacct:
            return
        self._next_sacct = now + self.config.sacct_refresh_s
        try:
            rows = sacct_completions(
                self.config.sacct_days,
                self.config.slurm.slurm_conf,
                self.config.slurm.timeout_s,
                now=now,
            )
        except SlurmError as exc:
            if source == "sacct":
                log.error("sacct history unavailable, using the store's history: %s", exc)
            else:
                log.info(
                    "no sacct history (%s); the Gittins distribution uses jobs the service saw",
                    exc.message,
                )
                self._next_sacct = float("inf")  # auto: accounting is off here, stop asking
            return
        added = self.store.add_completions(rows, "sacct")
        log.info(
            "sacct history: %d GPU jobs in the last %.0f days, %d new",
            len(rows),
            self.config.sacct_days,
            added,
        )

    def _current_values(
        self, targets: Sequence[Job], stored: dict[int, DecisionRecord]
    ) -> dict[int, int | None]:
        """What each job holds now. Priority mode reads Slurm's own value (an admin may have
        changed it); site-factor mode trusts what we last wrote (22.05's JSON lacks it)."""
        if self.config.mode == "priority":
            return {j.job_id: j.priority for j in targets}
        return {j.job_id: (stored[j.job_id].value if j.job_id in stored else None) for j in targets}

    def _write_values(self, res: PassResult, planned: dict[int, int]) -> dict[int, int]:
        """Write the planned values in one batch call; the ones that took."""
        if not planned:
            return {}
        if self.config.mode == "priority":
            failed = self.client.set_priorities(planned)
        else:
            failed = self.client.set_site_factors(planned)
        for exc in failed.values():
            log.warning("write failed, will retry next pass: %s", exc)
        res.errors += len(failed)
        res.writes += len(planned) - len(failed)
        return {j: v for j, v in planned.items() if j not in failed}

    def _set_placement(self, job_id: int, nodes: tuple[str, ...] | None) -> None:
        self.client.set_placement(job_id, required_nodes=list(nodes or ()))

    def _write(self, res: PassResult, fn, *args) -> bool:
        try:
            fn(*args)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            res.errors += 1
            log.warning("write failed, will retry next pass: %s", exc)
            return False
        res.writes += 1
        return True

    def _preempt(
        self,
        res: PassResult,
        decisions: Sequence[Decision],
        by_id: dict[int, Job],
        nodes: Sequence[Node],
        pins: set[int],
    ) -> None:
        """Requeue the opted-in running jobs the preemption rule picks for the best
        waiting job (`policy.preemption.choose_victims`, as the simulator does)."""
        top, victims = preemption_victims(
            decisions,
            by_id,
            nodes,
            pins,
            time.time(),
            self.config.policy,
            self.config.placement_mode,
        )
        for job_id in victims[: self.config.max_requeues_per_pass]:
            if self._write(res, self.client.requeue, job_id):
                res.requeued.append(job_id)
                log.info("requeued job %d (rank below waiting job %d)", job_id, top)

    # ---- loop ------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def serve(self, once: bool = False) -> int:
        """Run passes until stopped; back off on errors (Slurm, store), never lose state."""
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                previous[sig] = signal.signal(sig, lambda *_: self.stop())
            except ValueError:  # not the main thread (tests)
                pass
        try:
            return self._loop(once)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self, once: bool) -> int:
        predictor = PeriodicRebuild(self.config.predictor, self.config.store)
        while not self._stop.is_set():
            delay = self.config.interval_s
            try:
                self.run_pass()
                if self.failures:
                    log.warning("recovered after %d failed passes; caught up", self.failures)
                self.failures = 0
                if not self.dry_run:
                    predictor.run_if_due()  # logs its own failures, never raises
            except Exception as exc:  # Slurm, the store or a bug: log, back off, keep going
                self.failures += 1
                delay = min(
                    self.config.backoff_max_s, self.config.interval_s * 2 ** min(self.failures, 10)
                )
                if self.metrics is not None:
                    self.metrics.errors.inc()
                if isinstance(exc, SlurmError):
                    log.warning(
                        "pass failed (%d in a row), retrying in %.0fs: %s",
                        self.failures,
                        delay,
                        exc,
                    )
                else:
                    log.exception(
                        "pass failed (%d in a row), retrying in %.0fs: %s: %s",
                        self.failures, delay, type(exc).__name__, exc,
                    )  # fmt: skip
                    # in-memory copies may be ahead of the store: reload them next pass
                    self._records = self._decisions = None
                if once:
                    return 1
            if once:
                return 0
            self._stop.wait(delay)
        return 0
