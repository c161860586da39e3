"""The store's SQLite schema, as the ordered list of migrations that build it, and the
shape of a completion row.

`Store` applies the ones a file lacks at open (`PRAGMA user_version` counts those
applied), so a file written by any earlier release is brought forward in order.
"""

from __future__ import annotations

from collections.abc import Sequence

# Each entry upgrades the schema from version i to i+1. Append, never edit.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE jobs (
        job_id INTEGER PRIMARY KEY,
        user TEXT NOT NULL DEFAULT '',
        partition TEXT NOT NULL DEFAULT '',
        name TEXT NOT NULL DEFAULT '',
        model_tag TEXT,
        gpus INTEGER NOT NULL DEFAULT 0,
        submit_time REAL NOT NULL DEFAULT 0,
        closed_gpu_s REAL NOT NULL DEFAULT 0,   -- GPU-seconds of finished run stints
        closed_run_s REAL NOT NULL DEFAULT 0,   -- wall seconds of finished run stints
        last_run_s REAL NOT NULL DEFAULT 0,     -- length of the latest finished stint
        run_start REAL,                         -- start of the current stint (Slurm's StartTime)
        waiting_since REAL,                     -- when it last became pending
        last_seen REAL NOT NULL DEFAULT 0,
        state TEXT NOT NULL DEFAULT 'PENDING',
        done INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE completions (
        job_id INTEGER PRIMARY KEY,
        gpu_s REAL NOT NULL,
        run_s REAL NOT NULL,
        end_time REAL NOT NULL,
        source TEXT NOT NULL DEFAULT 'service'
    );
    CREATE INDEX completions_end ON completions(end_time);
    CREATE TABLE decisions (
        job_id INTEGER PRIMARY KEY,
        rank INTEGER NOT NULL,
        queue INTEGER NOT NULL,
        gittins REAL NOT NULL,
        promoted INTEGER NOT NULL,
        reason TEXT NOT NULL,
        value INTEGER,                -- priority or site factor we wrote (NULL: untouched)
        mode TEXT NOT NULL,
        placement TEXT,               -- JSON list of node names we pinned, or NULL
        decided_at REAL NOT NULL
    );
    CREATE TABLE pins (
        job_id INTEGER PRIMARY KEY,
        pinned_by TEXT NOT NULL,
        pinned_at REAL NOT NULL
    );
    CREATE TABLE job_reports (
        node TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        period_start REAL NOT NULL,
        period_end REAL NOT NULL,
        payload TEXT NOT NULL,
        received_at REAL NOT NULL,
        PRIMARY KEY (node, job_id, period_start)
    );
    CREATE TABLE passes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at REAL NOT NULL,
        duration_s REAL NOT NULL,
        ranked INTEGER NOT NULL,
        writes INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        dry_run INTEGER NOT NULL
    );
    """,
    # 2: the starvation guard's promotion is remembered for the stint it started
    """
    ALTER TABLE jobs ADD COLUMN promoted_at_gpu_s REAL;
    """,
    # 3: a completed job's kind, which the conditioned Gittins index groups by
    """
    ALTER TABLE completions ADD COLUMN user TEXT NOT NULL DEFAULT '';
    ALTER TABLE completions ADD COLUMN name TEXT NOT NULL DEFAULT '';
    ALTER TABLE completions ADD COLUMN account TEXT NOT NULL DEFAULT '';
    ALTER TABLE completions ADD COLUMN time_limit_s REAL;
    """,
    # 4: a running stint is charged per GPU-count segment (slurm_ext.core.attained)
    """
    ALTER TABLE jobs ADD COLUMN open_gpu_s REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN seg_start REAL;
    """,
    # 5: what the read-only user view (slurm_ext/userview*) shows without asking Slurm:
    # the history group each index came from, Slurm's pending reason, the nodes' GPUs
    """
    ALTER TABLE decisions ADD COLUMN group_label TEXT NOT NULL DEFAULT '';
    ALTER TABLE decisions ADD COLUMN group_samples INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE decisions ADD COLUMN slurm_reason TEXT NOT NULL DEFAULT '';
    CREATE TABLE node_gpus (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        gpus INTEGER NOT NULL,
        gpus_alloc INTEGER NOT NULL,
        gpu_type TEXT
    );
    """,
    # 6: the order of all decided jobs as one row, so a pass in which running jobs move
    # past waiting ones writes one row, not the rank of every waiting job; the rank a
    # reader sees is the job's place in it (`Store.decisions`)
    """
    CREATE TABLE decision_order (
        id INTEGER PRIMARY KEY CHECK (id = 0),
        job_ids BLOB NOT NULL                   -- int64 little-endian job ids, best first
    );
    """,
    # 7: a completion's GPU count, which GPU-s / run s cannot give for a run Slurm timed
    # at 0 s (NULL on older rows: the ratio stands in, as before)
    """
    ALTER TABLE completions ADD COLUMN gpus INTEGER;
    """,
    # 8: a node's partitions (comma-separated), so the user view gives free and
    # fragmented GPUs per partition and GPU type
    """
    ALTER TABLE node_gpus ADD COLUMN partitions TEXT NOT NULL DEFAULT '';
    """,
]
# a completion row: (job_id, gpu_s, run_s, end_time), optionally followed by the kind
# (user, name, account, time_limit_s) and then the GPU count
COMPLETION_KIND_DEFAULTS = ("", "", "", None)
SCHEMA_VERSION = len(MIGRATIONS)


def completion_row(row: Sequence) -> tuple:
    """A completion row padded to its nine columns (the kind and GPUs unknown where absent)."""
    if len(row) not in (4, 8, 9):
        raise ValueError(f"completion row needs 4, 8 or 9 fields, got {len(row)}")
    if len(row) == 4:
        row = (*row, *COMPLETION_KIND_DEFAULTS)
    return tuple(row) if len(row) == 9 else (*row, None)


def completion_gpus(gpus: int | None, gpu_s: float, run_s: float) -> int | None:
    """A completion's GPU count: the stored one, else (rows written before it was stored)
    GPU-s / run s, as both writers store gpu_s = GPUs x run_s; None for a 0 s run then."""
    if gpus is not None:
        return gpus
    return round(gpu_s / run_s) if run_s > 0 else None
