"""The read-only user view on the service's listener: `GET /`, `/v1/queue`, `/v1/jobs/ID`.

Served from the store, never from Slurm, and built so that no request can slow the
service's pass:
- requests never read the store: they get the bytes (JSON and HTML) the view's own
  thread rendered. That thread looks at the store's last pass every `refresh_s` (one
  tiny query) and reads and renders the store only when a new pass has finished, i.e.
  once per pass and within `refresh_s` after it, while the service sleeps until the next
  pass, whatever the clients do;
- it reads with its own read-only SQLite connection, in one short read transaction: in
  WAL mode a reader never blocks the writer, and the pass's WAL checkpoint does not
  wait for readers (Store.checkpoint);
- a failed read is logged once and retried every `refresh_s`; the last good view is
  served meanwhile, its `as_of` saying how old it is (503 before the first one);
- at most `client_rate` answers per second (a burst of `client_burst`) for one client
  address (an IPv6 /64), and `rate` (a burst of `burst`) for all clients together;
  beyond either a request gets 429 at once: sending the answers is CPU work in the
  service's process, the global bucket bounds it whatever the clients do, and the
  per-client one keeps a single client from taking all of it;
- what it shows is `privacy` (slurm_ext/userview/privacy.py): "full", "anonymous"
  (no user names, no group labels that name a user, job or account) or "off";
- everything else a client can cost is bounded by the listener (ReportListener):
  connections, header size and time, the time to take the answer.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_ext.service.listener import Outcome
from slurm_ext.store.db import Store, StoreError
from slurm_ext.store.rows import DecisionRecord, JobRecord
from slurm_ext.userview.page import render_page
from slurm_ext.userview.privacy import anonymous
from slurm_ext.userview.rows import (
    Waiting,
    explain_info,
    free_gpus,
    free_gpus_by_pool,
    node_rows,
    queue_row,
    sort_rows,
)

log = logging.getLogger("slurm_ext.service.loop")

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


MAX_CLIENT_BUCKETS = 4096


class TokenBucket:
    """`rate` tokens a second, at most `burst` held; `take` spends one if there is one."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(frozen=True)
class Built:
    """One read of the store, rendered."""

    as_of: float  # wall time of the read
    queue: bytes  # /v1/queue
    page: bytes  # /
    records: dict[int, JobRecord]  # /v1/jobs/ID is rendered per request from these
    decisions: dict[int, DecisionRecord]
    pins: frozenset[int]
    pass_id: int | None = None  # the last pass the read saw

    def info(self, job_id: int, hidden: bool) -> dict | None:
        d, rec = self.decisions.get(job_id), self.records.get(job_id)
        if d is None and rec is None:
            return None
        info = explain_info(job_id, d, rec, job_id in self.pins, self.as_of)
        return anonymous(info) if hidden else info


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
        client_rate: float = 5.0,
        client_burst: int = 10,
    ) -> None:
        if privacy not in ("full", "anonymous", "off"):
            raise ValueError(f"user view privacy {privacy!r}: full, anonymous or off")
        self.store_path = store_path
        self.privacy = privacy
        self.refresh_s = refresh_s
        self.max_page_rows = max_page_rows
        self.wall = wall
        self.reads = self.attempts = 0  # full reads and looks at the store (tests count them)
        self._built: Built | None = None  # replaced whole by the refresher: no lock needed
        self._all = TokenBucket(rate, burst)
        self._clients: dict[str, TokenBucket] = {}
        self.client_rate, self.client_burst = client_rate, client_burst
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if privacy != "off":
            self._thread = threading.Thread(
                target=self._refresh, name="slurm-ext-view", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _refresh(self) -> None:
        """The refresher thread: rebuild after each pass; say once when the store fails."""
        failing = False
        while not self._stop.is_set():
            try:
                self._built = self.build(self._built)
                if failing:
                    log.info("user view: the store is readable again")
                failing = False
            except (StoreError, sqlite3.Error, OSError) as exc:
                if not failing:
                    log.warning("user view: cannot read the store (retrying): %s", exc)
                failing = True
            except Exception as exc:  # a bug: keep the last view, keep the service
                if not failing:
                    log.exception("user view: cannot build the view: %s", exc)
                failing = True
            self._stop.wait(self.refresh_s)

    async def answer(self, method: str, path: str, client: str = "") -> Outcome | None:
        """The answer for a view path, or None when `path` is not one of the view's.
        `client`: the asking address (listener.client_key), for its own rate limit."""
        if path not in ("/", "/v1/queue") and not path.startswith(JOBS_PREFIX):
            return None
        if self.privacy == "off":
            return Outcome(404, b"the user view is off on this service (user_view)\n")
        if method != "GET":
            return Outcome(
                405, b"the user view is read-only: GET only\n", headers=(("Allow", "GET"),)
            )
        if not self._take_token(client):
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
        built = self._built
        if built is None:
            return Outcome(503, b"the view is not ready (or the store unreadable), retry later\n")
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

    def _take_token(self, client: str) -> bool:
        """One token from the client's bucket, then one from everyone's (called on the
        listener's one event-loop thread only). At most MAX_CLIENT_BUCKETS buckets are
        kept: past that, the full ones (idle clients) are forgotten, then all of them."""
        now = time.monotonic()
        mine = self._clients.get(client)
        if mine is None:
            if len(self._clients) >= MAX_CLIENT_BUCKETS:
                self._clients = {k: b for k, b in self._clients.items() if not b.full(now)}
                if len(self._clients) >= MAX_CLIENT_BUCKETS:
                    self._clients.clear()
            mine = self._clients[client] = TokenBucket(self.client_rate, self.client_burst)
        return mine.take(now) and self._all.take(now)

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
                    return previous
                decisions, records = store.decisions(), store.jobs()
                pins, nodes = store.pins(), store.nodes()
        finally:
            store.close()
        self.reads += 1
        now = self.wall()
        rows = sort_rows([queue_row(d, records.get(j), now) for j, d in decisions.items()])
        if self.privacy == "anonymous":
            rows = [anonymous(r) for r in rows]
        free = free_gpus(nodes, (r["gpus"] for r in rows if r["state"] == "PENDING"))
        nodes_out = node_rows(nodes)
        # each waiting job in its partitions (the store keeps no GPU type: any type)
        waits = [
            Waiting(rec.partition if (rec := records.get(r["job_id"])) else "", None, r["gpus"])
            for r in rows
            if r["state"] == "PENDING"
        ]
        pools = free_gpus_by_pool(nodes, waits)
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
            "free_gpus_by_pool": pools,
            "nodes": nodes_out,
            "jobs": rows,
        }
        page = render_page(
            rows, nodes_out, free, last, now, self.max_page_rows, self.privacy, pools
        )
        queue = json.dumps(doc).encode()
        return Built(now, queue, page, records, decisions, frozenset(pins), pass_id)
