"""The read-only user view on the service's listener: `GET /`, `/v1/queue`, `/v1/jobs/ID`.

Served from the store, never from Slurm, and built so that no request rate can slow the
service's pass:
- one look at the store per `refresh_s` at most, however many requests arrive, and one
  full read and rendering (JSON and HTML bytes) per service pass at most: every request
  until then gets the same bytes; concurrent requests for a stale view wait for one
  rebuild;
- the rebuild runs on its own thread (not the report workers) with its own read-only
  SQLite connection, in one short read transaction: in WAL mode a reader never blocks
  the writer, and the pass's WAL checkpoint does not wait for readers (Store.checkpoint);
- a failed read is not retried before `refresh_s` has passed (the last good view is
  served meanwhile, its `as_of` saying how old it is);
- at most `rate` answers per second (a burst of `burst`) for all clients together;
  beyond that a request gets 429 at once: sending the answers is CPU work in the
  service's process, and this bounds it whatever the clients do;
- everything else a client can cost is bounded by the listener (ReportListener):
  connections, header size and time, the time to take the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_ext.report_listener import Outcome
from slurm_ext.store import DecisionRecord, JobRecord, Store, StoreError
from slurm_ext.userview import explain_info, free_gpus, node_rows, queue_row, sort_rows
from slurm_ext.userview_page import render_page

log = logging.getLogger("slurm_ext.service")

JSON = "application/json"
HTML = "text/html; charset=utf-8"
# the page needs nothing from anywhere: no script, no image, no font, no frame
PAGE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
)
JSON_HEADERS = (("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store"))
JOBS_PREFIX = "/v1/jobs/"


@dataclass(frozen=True)
class Built:
    """One read of the store, rendered."""

    at: float  # monotonic time of the read
    as_of: float  # wall time of the read
    queue: bytes  # /v1/queue
    page: bytes  # /
    records: dict[int, JobRecord]  # /v1/jobs/ID is rendered per request from these
    decisions: dict[int, DecisionRecord]
    pins: frozenset[int]
    pass_id: int | None = None  # the last pass the read saw

    def info(self, job_id: int, anonymous: bool) -> dict | None:
        d, rec = self.decisions.get(job_id), self.records.get(job_id)
        if d is None and rec is None:
            return None
        info = explain_info(job_id, d, rec, job_id in self.pins, self.as_of)
        return info | {"user": ""} if anonymous else info


class UserView:
    """Answers the view's paths for ReportListener; `answer` runs on its event loop."""

    def __init__(
        self,
        store_path: str | Path,
        privacy: str = "full",
        refresh_s: float = 5.0,
        max_page_rows: int = 500,
        rate: float = 20.0,
        burst: int = 40,
        wall=time.time,
    ) -> None:
        self.store_path = store_path
        self.privacy = privacy
        self.refresh_s = refresh_s
        self.max_page_rows = max_page_rows
        self.wall = wall
        self.reads = self.attempts = 0  # store reads done and tried (the tests count them)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="slurm-ext-view")
        self._built: Built | None = None
        self._building: asyncio.Task | None = None
        self._failed_at = float("-inf")
        self.rate, self.burst = rate, burst
        self._tokens, self._tokens_at = float(burst), time.monotonic()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def answer(self, method: str, path: str) -> Outcome | None:
        """The answer for a view path, or None when `path` is not one of the view's."""
        if path not in ("/", "/v1/queue") and not path.startswith(JOBS_PREFIX):
            return None
        if self.privacy == "off":
            return Outcome(404, b"the user view is off on this service (user_view)\n")
        if method != "GET":
            return Outcome(
                405, b"the user view is read-only: GET only\n", headers=(("Allow", "GET"),)
            )
        if not self._take_token():
            return Outcome(
                429,
                b"too many requests for the view, retry later\n",
                headers=(("Retry-After", "1"),),
            )
        job_id = None
        if path.startswith(JOBS_PREFIX):
            tail = path[len(JOBS_PREFIX) :]
            if not (tail.isascii() and tail.isdigit() and len(tail) <= 12):
                return Outcome(400, b"a job id is a number: /v1/jobs/ID\n")
            job_id = int(tail)
        built = await self._current()
        if built is None:
            return Outcome(503, b"the store cannot be read now, retry later\n")
        if path == "/":
            return Outcome(200, built.page, HTML, PAGE_HEADERS)
        if path == "/v1/queue":
            return Outcome(200, built.queue, JSON, JSON_HEADERS)
        info = built.info(job_id, self.privacy == "anonymous")
        if info is None:
            return Outcome(
                404,
                f"job {job_id} is not in the service's store: finished, never seen, or "
                "submitted after the last pass\n".encode(),
            )
        body = json.dumps(info | {"as_of": built.as_of}, indent=1).encode()
        return Outcome(200, body, JSON, JSON_HEADERS)

    def _take_token(self) -> bool:
        """The token bucket (called on the listener's one event-loop thread only)."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._tokens_at) * self.rate)
        self._tokens_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def _current(self) -> Built | None:
        """The cached view, rebuilt once when older than refresh_s (single flight)."""
        built, now = self._built, time.monotonic()
        fresh = built is not None and now - built.at < self.refresh_s
        if fresh or now - self._failed_at < self.refresh_s:
            return built
        if self._building is None:
            self._building = asyncio.ensure_future(self._rebuild())
        return await asyncio.shield(self._building)

    async def _rebuild(self) -> Built | None:
        try:
            self._built = await asyncio.get_running_loop().run_in_executor(
                self._pool, self.build, self._built
            )
        except (StoreError, sqlite3.Error, OSError) as exc:
            self._failed_at = time.monotonic()
            log.warning("user view: cannot read the store: %s", exc)
        except Exception as exc:
            self._failed_at = time.monotonic()
            log.exception("user view: cannot build the view: %s", exc)
        finally:
            self._building = None
        return self._built

    def build(self, previous: Built | None = None) -> Built:
        """Read the store once (one short snapshot) and render every answer; when no pass
        has run since `previous` was read, keep its answers (only the last pass changes
        what the store says) and read nothing else."""
        self.attempts += 1
        store = Store(self.store_path, readonly=True)
        try:
            with store.snapshot():
                last = store.last_pass()
                pass_id = last["id"] if last else None
                if previous is not None and pass_id == previous.pass_id:
                    return replace(previous, at=time.monotonic())
                decisions, records = store.decisions(), store.jobs()
                pins, nodes = store.pins(), store.nodes()
        finally:
            store.close()
        self.reads += 1
        now, at = self.wall(), time.monotonic()
        rows = sort_rows([queue_row(d, records.get(j), now) for j, d in decisions.items()])
        if self.privacy == "anonymous":
            rows = [r | {"user": ""} for r in rows]
        free = free_gpus(nodes, (r["gpus"] for r in rows if r["state"] == "PENDING"))
        nodes_out = node_rows(nodes)
        doc = {
            "as_of": now,
            "privacy": self.privacy,
            "last_pass": last,
            "free_gpus": {
                "free": free.free,
                "widest_waiting": free.widest_waiting,
                "stranded": free.stranded,
                "fragmentation": round(free.fragmentation, 3),
            },
            "nodes": nodes_out,
            "jobs": rows,
        }
        page = render_page(rows, nodes_out, free, last, now, self.max_page_rows, self.privacy)
        queue = json.dumps(doc).encode()
        return Built(at, now, queue, page, records, decisions, frozenset(pins), pass_id)
