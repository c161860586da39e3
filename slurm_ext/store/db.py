"""The service's memory: attained GPU service, completed-job history, decisions, reports.

One SQLite file in WAL mode so the CLI can read while the service writes. The schema
is versioned (`PRAGMA user_version`) and migrated forward in order at open; a file from
a newer release is refused rather than guessed at.

Bounds: one service per store (slurm_ext.store.lock); the WAL is
folded back and truncated after every pass (`checkpoint`), so a reader that holds a read
transaction grows it only while it holds it; readers (the CLI) read in short snapshots.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from slurm_ext.core.model import Completed, Node
from slurm_ext.core.reports import JobReport
from slurm_ext.store.rows import DecisionRecord, JobRecord
from slurm_ext.store.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    completion_gpus,
    completion_row,
)

BUSY_TIMEOUT_S = 30
WAL_LIMIT_BYTES = 4 << 20  # journal_size_limit: what a checkpoint leaves of the WAL file


class StoreError(RuntimeError):
    """The store file cannot be opened or is from an incompatible release."""


STORE_MODE = 0o640  # owner and group: SQLite gives its -wal and -shm files the same mode


def _create_private(path: Path) -> None:
    """Create a new store readable by its owner and group only, before SQLite opens it.

    Any user who can read the store can hold a read transaction open, and while one is
    held SQLite cannot reset the WAL, which then grows with every pass. An existing store
    keeps the mode its admin gave it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, STORE_MODE)
    except FileExistsError:
        return
    os.close(fd)


class Store:
    """SQLite-backed state. `readonly=True` opens without writing (for the CLI)."""

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        try:
            if readonly:
                if not self.path.exists():
                    raise StoreError(f"{self.path}: store not found (has the service run yet?)")
                self.db = _open_readonly(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _create_private(self.path)
                self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            self.db.row_factory = sqlite3.Row
            self._migrate(readonly)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{self.path}: cannot open store: {exc}") from exc

    def _migrate(self, readonly: bool) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this release's "
                f"({SCHEMA_VERSION}); upgrade slurm-ext or use another store file"
            )
        if version == SCHEMA_VERSION:
            return
        if readonly:
            raise StoreError(
                f"{self.path}: schema version {version} needs migration; run the service once"
            )
        for target in range(version, SCHEMA_VERSION):
            with self.db:
                self.db.executescript(
                    "BEGIN;" + MIGRATIONS[target] + f";PRAGMA user_version={target + 1};COMMIT;"
                )

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def snapshot(self) -> Iterator[Store]:
        """One consistent read of several tables. Keep the block short: while a read
        transaction is open the writer cannot truncate its WAL."""
        self.db.execute("BEGIN")
        try:
            yield self
        finally:
            self.db.execute("COMMIT")

    def checkpoint(self) -> bool:
        """Fold the WAL into the database and truncate it, without waiting for readers.

        False when a reader's open snapshot kept part of it (then it is retried after
        the next pass; the WAL can only grow while a reader holds a transaction)."""
        self.db.execute("PRAGMA busy_timeout=0")  # never stall a pass behind a reader
        try:
            busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:
            busy = 1
        finally:
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        return busy == 0

    def wal_bytes(self) -> int:
        wal = Path(f"{self.path}-wal")
        return wal.stat().st_size if wal.exists() else 0

    @property
    def schema_version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    # ---- jobs ------------------------------------------------------------------------
    def jobs(self, include_done: bool = False) -> dict[int, JobRecord]:
        sql = "SELECT * FROM jobs" + ("" if include_done else " WHERE done = 0")
        return {r["job_id"]: _job_record(r) for r in self.db.execute(sql)}

    def job(self, job_id: int) -> JobRecord | None:
        r = self.db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _job_record(r) if r else None

    def save_jobs(
        self,
        records: Iterable[JobRecord],
        completions: Sequence[tuple[int, float, float, float]] = (),
    ) -> None:
        """Upsert job records and add completions (job_id, gpu_s, run_s, end_time) atomically."""
        with self.db:
            self.db.executemany(
                """INSERT INTO jobs VALUES (:job_id, :user, :partition, :name, :model_tag, :gpus,
                       :submit_time, :closed_gpu_s, :closed_run_s, :last_run_s, :run_start,
                       :waiting_since, :last_seen, :state, :done, :promoted_at_gpu_s,
                       :open_gpu_s, :seg_start)
                   ON CONFLICT(job_id) DO UPDATE SET user=excluded.user, partition=excluded.partition,
                       name=excluded.name, model_tag=excluded.model_tag, gpus=excluded.gpus,
                       submit_time=excluded.submit_time, closed_gpu_s=excluded.closed_gpu_s,
                       closed_run_s=excluded.closed_run_s, last_run_s=excluded.last_run_s,
                       run_start=excluded.run_start, waiting_since=excluded.waiting_since,
                       last_seen=excluded.last_seen, state=excluded.state, done=excluded.done,
                       promoted_at_gpu_s=excluded.promoted_at_gpu_s,
                       open_gpu_s=excluded.open_gpu_s, seg_start=excluded.seg_start""",
                [r.__dict__ | {"done": int(r.done)} for r in records],
            )
            self.db.executemany(
                "INSERT OR IGNORE INTO completions (job_id, gpu_s, run_s, end_time, user, name,"
                " account, time_limit_s, gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [completion_row(c) for c in completions],
            )

    def history_gpu_s(self, window: int) -> list[float]:
        """GPU-seconds of the most recent `window` completed jobs (the Gittins sample)."""
        rows = self.db.execute(
            "SELECT gpu_s FROM completions ORDER BY end_time DESC LIMIT ?", (int(window),)
        ).fetchall()
        return [r[0] for r in rows]

    def history(self, window: int) -> list[tuple[int | None, float]]:
        """(GPUs, GPU-seconds) of the most recent `window` completed jobs, for per-GPU-class
        Gittins tables."""
        rows = self.db.execute(
            "SELECT gpus, gpu_s, run_s FROM completions ORDER BY end_time DESC LIMIT ?",
            (int(window),),
        ).fetchall()
        return [(completion_gpus(n, g, r), g) for n, g, r in rows]

    def history_kinds(self, window: int) -> list[Completed]:
        """`history` with each job's kind (user, name, account, time limit), oldest first
        as the policy's window expects, for the conditioned Gittins tables."""
        rows = self.db.execute(
            "SELECT gpus, gpu_s, run_s, user, name, account, time_limit_s FROM completions"
            " ORDER BY end_time DESC LIMIT ?",
            (int(window),),
        ).fetchall()
        return [
            Completed(completion_gpus(k, g, r), g, u, n, a, t)
            for k, g, r, u, n, a, t in reversed(rows)
        ]

    def add_completions(self, rows: Iterable[tuple], source: str) -> int:
        """Completion rows (see schema.completion_row) from `source` ("sacct"); rows of
        jobs already recorded are ignored."""
        with self.db:
            cur = self.db.executemany(
                "INSERT OR IGNORE INTO completions (job_id, gpu_s, run_s, end_time, user, name,"
                " account, time_limit_s, gpus, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*completion_row(r), source) for r in rows],
            )
        return cur.rowcount

    # ---- decisions -------------------------------------------------------------------
    def decisions(self) -> dict[int, DecisionRecord]:
        """The stored decisions, each with its rank: its place in the stored order (the
        rank column holds the rank when the decision was made, which later passes do not
        rewrite; a decision the order lacks keeps it)."""
        if not self.db.in_transaction:  # the rows and the order from the same commit
            with self.snapshot():
                return self.decisions()
        out = {r["job_id"]: _decision_record(r) for r in self.db.execute("SELECT * FROM decisions")}
        row = self.db.execute("SELECT job_ids FROM decision_order WHERE id = 0").fetchone()
        for i, job_id in enumerate(_unpack_ids(row[0]) if row else ()):
            d = out.get(job_id)
            if d is not None and d.rank != i:
                out[job_id] = d.reranked(i)
        return out

    def save_decisions(
        self,
        records: Iterable[DecisionRecord],
        drop: Iterable[int] = (),
        order: Sequence[int] | None = None,
    ) -> None:
        """Upsert `records`, delete the decisions of `drop`, and (when given) replace the
        order, job ids best first, from which readers take each decision's rank;
        atomically."""
        with self.db:
            self.db.executemany("DELETE FROM decisions WHERE job_id = ?", [(j,) for j in drop])
            if order is not None:
                self.db.execute(
                    "INSERT OR REPLACE INTO decision_order VALUES (0, ?)", (_pack_ids(order),)
                )
            self.db.executemany(
                "INSERT OR REPLACE INTO decisions (job_id, rank, queue, gittins, promoted,"
                " reason, value, mode, placement, decided_at, group_label, group_samples,"
                " slurm_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        d.job_id,
                        d.rank,
                        d.queue,
                        d.gittins,
                        int(d.promoted),
                        d.reason,
                        d.value,
                        d.mode,
                        json.dumps(list(d.placement)) if d.placement is not None else None,
                        d.decided_at,
                        d.group,
                        d.group_samples,
                        d.slurm_reason,
                    )
                    for d in records
                ],
            )

    # ---- nodes (for the user view) ---------------------------------------------------
    def nodes(self) -> list[Node]:
        """The nodes' GPUs as the last pass saw them (what `save_nodes` wrote)."""
        return [
            Node(
                name=r[0],
                state=r[1],
                gpus=r[2],
                gpus_alloc=r[3],
                gpu_type=r[4],
                partitions=tuple(p for p in r[5].split(",") if p),
            )
            for r in self.db.execute(
                "SELECT name, state, gpus, gpus_alloc, gpu_type, partitions FROM node_gpus "
                "ORDER BY name"
            )
        ]

    def save_nodes(self, nodes: Iterable[Node]) -> None:
        """Replace the saved node GPU states (the service calls it only when they changed)."""
        with self.db:
            self.db.execute("DELETE FROM node_gpus")
            self.db.executemany(
                "INSERT INTO node_gpus (name, state, gpus, gpus_alloc, gpu_type, partitions) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (n.name, n.state, n.gpus, n.gpus_alloc, n.gpu_type, ",".join(n.partitions))
                    for n in nodes
                ],
            )

    # ---- pins ------------------------------------------------------------------------
    def pins(self) -> set[int]:
        return {r[0] for r in self.db.execute("SELECT job_id FROM pins")}

    def pin(self, job_id: int, who: str) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO pins VALUES (?, ?, ?)", (job_id, who, time.time())
            )

    def unpin(self, job_id: int) -> bool:
        with self.db:
            return self.db.execute("DELETE FROM pins WHERE job_id = ?", (job_id,)).rowcount > 0

    # ---- node agent reports ----------------------------------------------------------
    def add_reports(self, reports: Sequence[JobReport]) -> int:
        now = time.time()
        with self.db:
            # cumulative reports: a late re-delivery of an older one must not win (an equal
            # period_end may: the final report repeats the last running one, flagged final)
            cur = self.db.executemany(
                """INSERT INTO job_reports VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT(node, job_id, period_start) DO UPDATE SET
                       period_end=excluded.period_end, payload=excluded.payload,
                       received_at=excluded.received_at
                   WHERE excluded.period_end >= job_reports.period_end""",
                [
                    (r.node, r.job_id, r.period_start, r.period_end, json.dumps(r.__dict__), now)
                    for r in reports
                ],
            )
        return cur.rowcount

    def reports(self, job_id: int | None = None) -> list[JobReport]:
        sql, args = "SELECT payload FROM job_reports", ()
        if job_id is not None:
            sql, args = sql + " WHERE job_id = ?", (job_id,)
        out = []
        for (payload,) in self.db.execute(sql + " ORDER BY period_start", args):
            d = json.loads(payload)
            d["gpu_uuids"] = tuple(d.get("gpu_uuids") or ())
            out.append(JobReport(**d))
        return out

    # ---- passes ----------------------------------------------------------------------
    def record_pass(
        self,
        started_at: float,
        duration_s: float,
        ranked: int,
        writes: int,
        errors: int,
        dry_run: bool,
    ) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO passes (started_at, duration_s, ranked, writes, errors, dry_run) VALUES (?, ?, ?, ?, ?, ?)",
                (started_at, duration_s, ranked, writes, errors, int(dry_run)),
            )
            self.db.execute("DELETE FROM passes WHERE id <= (SELECT MAX(id) FROM passes) - 1000")

    def last_pass(self) -> dict | None:
        r = self.db.execute("SELECT * FROM passes ORDER BY id DESC LIMIT 1").fetchone()
        return dict(r) if r else None


def _pack_ids(job_ids: Sequence[int]) -> bytes:
    """Job ids as int64 little-endian (the decision order's column)."""
    a = array("q", job_ids)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def _unpack_ids(blob: bytes) -> array:
    if len(blob) % 8:
        raise StoreError(f"decision order of {len(blob)} bytes is not a list of int64 job ids")
    a = array("q", blob)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def _open_readonly(path: Path) -> sqlite3.Connection:
    """Open for reading by a user who may not write the store's directory.

    While the service runs, its WAL files exist and `mode=ro` reads through them. When
    it has stopped, SQLite removed them after a checkpoint and a reader that cannot
    create the -shm file gets "attempt to write a readonly database": the main file is
    then complete, and an immutable open reads it as it stands.
    """
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
    return sqlite3.connect(f"file:{path}?immutable=1", uri=True, timeout=10)


def _job_record(r: sqlite3.Row) -> JobRecord:
    d = dict(r)
    d["done"] = bool(d["done"])
    return JobRecord(**d)


def _decision_record(r: sqlite3.Row) -> DecisionRecord:
    d = dict(r)
    d["promoted"] = bool(d["promoted"])
    d["placement"] = tuple(json.loads(d["placement"])) if d["placement"] else None
    d["group"] = d.pop("group_label")
    return DecisionRecord(**d)
