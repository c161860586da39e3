"""The priority service: snapshot Slurm, rank with the policy core, write back the diff.

A thin shell. Each pass: read jobs and nodes through the SlurmClient, fold them into the
store's attained-service records (`slurm_ext.service.fold`; restart-safe: a stint's start
comes from Slurm's own StartTime), rank with `slurm_ext.policy.rank` (the same function
the simulator calls; `slurm_ext.service.rank_cache` redoes only what changed since the last
pass), turn the order into priority values with `priority_values.assign_values`, and
write only the jobs whose value, placement or run state must change.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from slurm_ext.core.classes import load_classes
from slurm_ext.core.model import Cluster, Decision, Job, JobClasses, JobView, Node
from slurm_ext.policy import could_start, no_preemption_note, starts_promoted, steady_reason
from slurm_ext.predict.from_store import PeriodicRebuild
from slurm_ext.service.config import ServiceConfig, SlurmSection
from slurm_ext.service.fold import TERMINAL, fold, persisted_fields
from slurm_ext.service.gc_pause import PassCollector
from slurm_ext.service.opportunistic_requeue import requeue_overdue
from slurm_ext.service.priority_values import assign_values, changed
from slurm_ext.service.rank_cache import RankCache
from slurm_ext.service.site_factors import compose
from slurm_ext.service.steps import (
    job_view,
    order_inversions,
    plan_placements,
    plan_preemption,
    preemption_victims,
    same_decision,
    waiting_inputs,
    with_kinds,
)
from slurm_ext.service.upkeep import Upkeep
from slurm_ext.service.writes import SlurmWrites
from slurm_ext.slurm.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_ext.store.db import Store
from slurm_ext.store.rows import DecisionRecord, JobRecord

log = logging.getLogger("slurm_ext.service.loop")
# the config and the pure steps, importable from here as before
__all__ = [
    "PassResult",
    "Service",
    "ServiceConfig",
    "SlurmSection",
    "job_view",
    "plan_placements",
    "preemption_victims",
    "same_decision",
    "with_kinds",
]

ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
# passes between two reads of the cluster's description (`SlurmClient.cluster()`: its
# partitions and node types change rarely; it is read again at once when nodes change)
CLUSTER_EVERY = 30


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
    inversions: tuple[int, int] = (0, 0)  # `order_inversions`: (inverted, compared)
    # what the preemption step says of waiting jobs it requeued nobody for (job -> words)
    preemption_notes: dict[int, str] = field(default_factory=dict)


# ---- the shell ----------------------------------------------------------------------


def _user_placed(job: Job, stored: DecisionRecord | None) -> bool:
    """The job's node list or exclusion is its owner's (not a pin this service wrote):
    the service never overrides it."""
    ours = stored is not None and stored.placement is not None
    return bool(job.required_nodes or job.excluded_nodes) and not ours


class Service:
    def __init__(
        self,
        config: ServiceConfig,
        client: SlurmClient,
        store: Store,
        dry_run: bool = False,
        metrics=None,
        classes: JobClasses | None = None,
    ) -> None:
        """`classes`: the co-location classes (default: read from `config.classes_file`)."""
        self.config = config
        self.classes = classes if classes is not None else load_classes(config.classes_file)
        self.client = client
        self.writes = SlurmWrites(client, config.mode)
        self.store = store
        self.dry_run = dry_run
        self.metrics = metrics
        self._stop = threading.Event()
        self.failures = 0
        # in-memory copies of the store's tables; the store is written only where they change
        self._promoted: set[int] = set()  # waiting jobs the last pass promoted
        self._records: dict[int, JobRecord] | None = None
        self._decisions: dict[int, DecisionRecord] | None = None
        self._views: dict[int, tuple[tuple, JobView]] = {}  # waiting jobs' last views
        self._order: list[int] | None = None  # the decision order the store holds
        self._ranker = RankCache()  # `policy.rank`, pass after pass
        self._collector = PassCollector()
        self._sites: dict[int, int] = {}  # composed: each active job's site factor
        self._cluster: Cluster | None = None  # the last description read, its node names
        self._cluster_nodes: tuple[str, ...] | None = None
        self._cluster_age = 0  # passes since it was read
        self._blocked: dict[int, str] = {}  # pending jobs' last reason that blocks them
        self.upkeep = Upkeep(
            config.history_source, config.sacct_days, config.sacct_refresh_s, config.value_max
        )

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
        """One pass: read Slurm, fold it into the records, rank, write what must change,
        remember the decisions. Each step below is one of these; the garbage collector
        waits until the pass is done (`slurm_ext.service.gc_pause`)."""
        t0 = time.monotonic()
        now = time.time() if now is None else now
        res = PassResult(started_at=now)
        with self._collector.during():
            self.upkeep.import_history(self.client, self.store, now)
            jobs = self._steady_reasons(self.client.jobs(states=ACTIVE + TERMINAL))
            nodes = self.client.nodes()
            records, stored = self._fold(jobs, now)
            active = [j for j in jobs if j.state.active and self.managed(j)]
            decisions = self._rank(active, records, now)
            res.decisions, res.ranked = decisions, len(decisions)
            by_id = {j.job_id: j for j in active}
            if self.config.composes:  # the order Slurm applies, with the site factors
                decisions, self._sites = compose(
                    decisions, self._ranker.key_of, by_id, stored, self.config.policy
                )
                res.decisions = decisions
            self.writes.forget(by_id.keys())  # jobs that left the queue
            values, placed = self._act(res, decisions, by_id, nodes, stored)
            if not self.config.composes:  # composed, Slurm's priority is the order
                res.inversions = order_inversions(decisions, by_id, res.planned)
            self._remember(decisions, by_id, stored, values, placed, now, res.preemption_notes)
            self.upkeep.save_nodes(self.store, nodes)
        self._finish(res, t0)
        return res

    def _steady_reasons(self, jobs: list[Job]) -> list[Job]:
        """The jobs with the reason to act on (`policy.reasons.steady_reason`: a blocked
        job whose priority the service just wrote reads `None` until Slurm's next
        scheduling cycle); remembers the pending jobs' blocking reasons."""
        blocked: dict[int, str] = {}
        out = []
        for job in jobs:
            if job.pending:
                reason = steady_reason(job.reason, self._blocked.get(job.job_id))
                if not could_start(reason):
                    blocked[job.job_id] = reason
                if reason != job.reason:
                    job = replace(job, reason=reason)
            out.append(job)
        self._blocked = blocked
        return out

    def _fold(
        self, jobs: Sequence[Job], now: float
    ) -> tuple[dict[int, JobRecord], dict[int, DecisionRecord]]:
        """Fold the snapshot into the attained-service records and persist the records
        that changed (with the completions); the records, and the stored decisions that
        still concern the same jobs (a reused job id: what was written for the old job
        says nothing about the new one)."""
        old, stored = self._load()
        f = fold(old, jobs, now, self._promoted)
        records = f.records
        changed = {j: records[j] for j in f.changed}
        self.store.save_jobs(
            [r for j, r in changed.items() if persisted_fields(r) != persisted_fields(old.get(j))],
            with_kinds(f.completions, jobs, records),
        )
        self._records = {j: r for j, r in records.items() if not r.done}
        reused = [j for j in changed if j in old and records[j].submit_time != old[j].submit_time]
        if reused:
            stored = {j: d for j, d in stored.items() if j not in reused}
        return records, stored

    def _rank(
        self, active: Sequence[Job], records: dict[int, JobRecord], now: float
    ) -> list[Decision]:
        """The policy's order of the managed active jobs: the simulator's `rank`, redoing
        only what changed since the last pass (`slurm_ext.service.rank_cache`)."""
        history = self.store.history_kinds(self.config.policy.history_window)
        views = []
        reused: dict[int, tuple[tuple, JobView]] = {}
        for job in active:
            rec = records[job.job_id]
            if rec.run_start is not None or job.running:
                views.append(job_view(job, rec, now))
                continue
            key = waiting_inputs(job, rec)
            last = self._views.get(job.job_id)
            if last is None or last[0] != key:
                # (the same pair kept otherwise: fewer new objects for the collector)
                last = (key, job_view(job, rec, now))
            reused[job.job_id] = last
            views.append(last[1])
        self._views = reused  # waiting jobs' views, for the next pass
        # the whole-job index unless this service preempts (`for_preemption`)
        policy = self.config.policy.for_preemption(self.config.preemption == "requeue")
        # composed: rank by the index alone; `site_factors.compose` adds Slurm's priority
        plain = replace(policy, fairshare_site_weight=0.0) if self.config.composes else policy
        decisions = self._ranker.rank(views, now, plain, history or None)
        self._promoted = starts_promoted(decisions, policy)
        return decisions

    def _act(
        self,
        res: PassResult,
        decisions: Sequence[Decision],
        by_id: dict[int, Job],
        nodes: Sequence[Node],
        stored: dict[int, DecisionRecord],
    ) -> tuple[dict[int, int], dict[int, tuple[str, ...] | None]]:
        """Write the values, placements and requeues this order asks for (planned only,
        in a dry run); what took: (values, placements) of the jobs written this pass."""
        pins = self.store.pins()
        targets = [
            job
            for d in decisions
            if (job := by_id[d.job_id]).pending and not job.held and d.job_id not in pins
        ]
        current = self.writes.current_values(targets, stored)
        if self.config.composes:
            desired = {j.job_id: self._sites[j.job_id] for j in targets}
        else:
            desired = assign_values(
                [j.job_id for j in targets], current, self.config.value_min, self.config.value_max
            )
        res.planned = changed(desired, current)
        placements: dict[int, tuple[str, ...] | None] = {}
        cluster = self._cluster_for(nodes)
        if self.config.placement:
            placements = plan_placements(
                [j for j in targets if not _user_placed(j, stored.get(j.job_id))],
                nodes,
                self.config.placement_mode,
                cluster,
            )
        res.placements = {j: p for j, p in placements.items() if p}
        values: dict[int, int] = {}
        placed: dict[int, tuple[str, ...] | None] = {}
        if self.dry_run:
            return values, placed
        names = [n.name for n in nodes]
        try:
            values.update(self.writes.values(res, res.planned))
            for job_id, nodes_ in placements.items():
                now_placed = stored[job_id].placement if job_id in stored else None
                if nodes_ != now_placed and self.writes.call(
                    res, self.writes.set_placement, job_id, nodes_, names
                ):
                    placed[job_id] = nodes_
            if self.config.preemption == "requeue":
                self._preempt(res, decisions, by_id, nodes, pins, cluster, stored)
            res.requeued += requeue_overdue(
                [j for j in by_id.values() if j.job_id not in res.requeued],
                self.store.reports,
                res.started_at,
                self.config.opportunistic,
                self.classes,
                lambda job_id: self.writes.call(res, self.client.requeue, job_id),
            )
        except SlurmUnavailable as exc:
            # the rest would each wait for the same timeout; what was not recorded
            # as written is written again next pass (same values: harmless)
            res.errors += 1
            log.warning("slurmctld stopped answering; writes resume next pass: %s", exc)
        return values, placed

    def _remember(
        self,
        decisions: Sequence[Decision],
        by_id: dict[int, Job],
        stored: dict[int, DecisionRecord],
        values: dict[int, int],
        placed: dict[int, tuple[str, ...] | None],
        now: float,
        notes: dict[int, str] | None = None,
    ) -> None:
        """Store this pass's decisions: only those that differ from the stored ones, and
        drop those of jobs that left. A job's value and placement are what this pass
        wrote, else what was stored. A decision keeps the time it was made while only its
        rank moves (every waiting job's rank moves when a running one passes it): the
        store keeps the order as one row (`Store.decisions` reads the ranks from it),
        written when it changed. `notes`: what the preemption step says of a waiting job,
        stored after its policy reason (`explain` and the user view show it)."""
        mode = self.config.mode
        notes = notes or {}
        fresh: dict[int, DecisionRecord] = {}
        new: list[DecisionRecord] = []
        for d in decisions:
            j = d.job_id
            old = stored.get(j)
            value = values.get(j, old.value if old is not None else None)
            placement = placed[j] if j in placed else (old.placement if old is not None else None)
            slurm_reason = by_id[j].reason
            if j in notes:
                d = replace(d, reason=f"{d.reason}; {notes[j]}" if d.reason else notes[j])
            if old is not None and same_decision(old, d, value, mode, placement, slurm_reason):
                fresh[j] = old if old.rank == d.rank else old.reranked(d.rank)
                continue
            fresh[j] = rec = DecisionRecord(
                job_id=j,
                rank=d.rank,
                queue=d.queue,
                gittins=d.index,
                promoted=d.promoted,
                reason=d.reason,
                value=value,
                mode=mode,
                placement=placement,
                decided_at=now,
                group=d.group,
                group_samples=d.group_samples,
                slurm_reason=slurm_reason,
            )
            new.append(rec)
        previous = self._decisions or {}
        order = [d.job_id for d in decisions]
        self.store.save_decisions(
            new,
            drop=[j for j in previous if j not in fresh],
            order=order if order != self._order else None,
        )
        self._decisions, self._order = fresh, order

    def _finish(self, res: PassResult, t0: float) -> None:
        """Record the pass, fold the store's WAL back, report it."""
        res.duration_s = time.monotonic() - t0
        self.store.record_pass(
            res.started_at, res.duration_s, res.ranked, res.writes, res.errors, self.dry_run
        )
        self.upkeep.checkpoint(self.store)
        self.upkeep.warn_inversions(res.inversions)
        if self.metrics is not None:
            self.metrics.observe_pass(res, res.decisions)
        log.info(
            "pass: %d jobs ranked, %d writes%s, %d errors, %d requeued, %.3fs",
            res.ranked,
            res.writes if not self.dry_run else len(res.planned),
            " (dry run, not written)" if self.dry_run else "",
            res.errors,
            len(res.requeued),
            res.duration_s,
        )

    def _preempt(
        self,
        res: PassResult,
        decisions: Sequence[Decision],
        by_id: dict[int, Job],
        nodes: Sequence[Node],
        pins: set[int],
        cluster: Cluster | None,
        stored: dict[int, DecisionRecord],
    ) -> None:
        """Requeue the opted-in running jobs the preemption rule picks for the best
        waiting job that could start, on the nodes it may use
        (`policy.preemption.choose_victims`, as the simulator does); note why nobody
        is requeued for the waiting jobs that do not get any (`res.preemption_notes`)."""
        ours = [j for j, d in stored.items() if d.placement is not None]
        plan = plan_preemption(
            decisions,
            by_id,
            nodes,
            pins,
            time.time(),
            self.config.policy,
            self.config.placement_mode,
            cluster,
            ours,
        )
        for d in decisions:
            job = by_id[d.job_id]
            if job.pending and (note := no_preemption_note(job.reason)):
                res.preemption_notes[d.job_id] = note
        if plan.top is not None and plan.note:
            res.preemption_notes[plan.top] = f"no job is requeued for it: {plan.note}"
        for job_id in plan.victims[: self.config.max_requeues_per_pass]:
            if self.writes.call(res, self.client.requeue, job_id):
                res.requeued.append(job_id)
                log.info("requeued job %d (rank below waiting job %d)", job_id, plan.top)

    def _cluster_for(self, nodes: Sequence[Node]) -> Cluster | None:
        """The cluster's description (partitions, node types), read again every
        CLUSTER_EVERY passes or when the nodes change; None where the backend cannot
        give one (then the rules treat every node as usable, as before)."""
        if not (self.config.placement or self.config.preemption == "requeue"):
            return None
        names = tuple(n.name for n in nodes)
        self._cluster_age += 1
        if names != self._cluster_nodes or self._cluster_age >= CLUSTER_EVERY:
            self._cluster_age, self._cluster_nodes = 0, names
            try:
                got = self.client.cluster()
            except (SlurmError, NotImplementedError) as exc:
                log.warning("cannot read the cluster's partitions, every node counts: %s", exc)
                got = None
            self._cluster = got if isinstance(got, Cluster) else None
        return self._cluster

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
                    self.metrics.failed_passes.inc()
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
