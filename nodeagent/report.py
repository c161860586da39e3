"""Delivery of per-job reports from a node agent to the priority service: signed POSTs
through a bounded on-disk spool with back-off, on a thread of their own (`ReportWorker`)
so that no service, however slow or hostile, holds up the agent's sampling loop.

The wire format (JobReport, encode/decode, signature, secret file) is
`slurm_ext.core.reports`, shared with the service that receives it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from pathlib import Path

from nodeagent.deadline_http import ExchangeFailed, post
from slurm_ext.core.reports import (
    NODE_HEADER,
    REPORTS_PATH,
    SIGNATURE_HEADER,
    JobReport,
    encode_reports,
    sign,
)

log = logging.getLogger(__name__)
MAX_ANSWER_BYTES = 4096  # the service answers 204, or a short error: more is not its answer
MAX_QUEUED = 64  # batches waiting for the sender thread (it takes them between POSTs)


def restamp(body: bytes, sent_at: float) -> bytes:
    """The same batch with `sent_at` set to when it is really sent (a spooled batch may
    wait hours for the service); ValueError when the spooled body is not our JSON."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"spooled batch is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("spooled batch is not a JSON object")
    doc["sent_at"] = sent_at
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


class ReportError(RuntimeError):
    """A POST failed; `retriable` is False when resending the same body cannot succeed."""

    def __init__(self, message: str, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


def reports_url(service_url: str) -> str:
    base = service_url.rstrip("/")
    return base if base.endswith(REPORTS_PATH) else base + REPORTS_PATH


def post_body(
    service_url: str, body: bytes, secret: bytes, timeout: float = 10.0, node: str = ""
) -> None:
    """POST one signed body and read the answer, all within `timeout` seconds; raise
    ReportError on anything but a whole 2xx answer. `node` names the sender so the
    service can check a per-node key."""
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret)}
    if node:
        headers[NODE_HEADER] = node
    try:
        answer = post(reports_url(service_url), body, headers, timeout, MAX_ANSWER_BYTES)
    except ExchangeFailed as exc:
        raise ReportError(f"no answer from the service: {exc}") from exc
    if not 200 <= answer.status < 300:
        # 400/413/422: the body itself is refused, resending it cannot help.
        raise ReportError(
            f"service answered {answer.status} {answer.reason}",
            retriable=answer.status not in (400, 413, 422),
        )


def post_reports(
    service_url: str, node: str, reports: list[JobReport], secret: bytes, timeout: float = 10.0
) -> None:
    """Encode, sign and POST reports once (no spool); raise ReportError on failure."""
    post_body(service_url, encode_reports(node, reports), secret, timeout, node)


class ReportSender:
    """Delivers report batches through a bounded on-disk spool with exponential back-off.

    Every batch is written to the spool before any attempt, so a crash or an unreachable
    service loses nothing until the spool bound is hit (then the oldest batches go, and
    that is logged). Batches are sent oldest first; one failure stops the flush and backs
    off (base, doubling, capped at backoff_max_s).

    Logging is bounded: the first failure of an outage is a warning, later retries are
    debug lines; once deliveries have failed for `warn_after_s` an error says so (how
    long, how many batches wait, the last reason) and is repeated at most every
    `warn_every_s`; the first delivery after an outage is logged once.
    """

    def __init__(
        self,
        service_url: str,
        node: str,
        secret: bytes,
        spool_dir: str | Path,
        max_spool_files: int = 1000,
        timeout: float = 10.0,
        backoff_base_s: float = 5.0,
        backoff_max_s: float = 300.0,
        warn_after_s: float = 600.0,
        warn_every_s: float = 3600.0,
    ) -> None:
        self.service_url = service_url
        self.node = node
        self.secret = secret
        self.spool = Path(spool_dir)
        self.spool.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_spool_files = max_spool_files
        self.timeout = timeout
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.failures = 0
        self.next_try = 0.0
        self.sent_batches = 0
        self.dropped_batches = 0
        self.warn_after_s = warn_after_s
        self.warn_every_s = warn_every_s
        self.failing_since: float | None = None  # first failure of the current outage
        self._last_alarm: float | None = None
        self._seq = 0
        # the sender thread and the agent's shutdown may both spool; one flush at a time
        self._spool_lock = threading.Lock()
        self._flush_lock = threading.Lock()

    def pending(self) -> list[Path]:
        return sorted(self.spool.glob("batch-*.json"))

    def enqueue(self, reports: list[JobReport], now: float | None = None) -> None:
        if not reports:
            return
        body = encode_reports(self.node, reports, sent_at=now)
        with self._spool_lock:
            self._seq += 1
            name = f"batch-{time.time_ns():020d}-{os.getpid()}-{self._seq:06d}.json"
            tmp = self.spool / ("." + name)
            tmp.write_bytes(body)
            tmp.replace(self.spool / name)
            files = self.pending()
            excess = len(files) - self.max_spool_files
            for old in files[: max(0, excess)]:
                old.unlink(missing_ok=True)
                self.dropped_batches += 1
                log.warning(
                    "report spool full (%d batches): dropped oldest %s", len(files), old.name
                )

    def flush(self, now: float | None = None) -> int:
        """Send spooled batches unless backing off; return how many were delivered."""
        with self._flush_lock:
            return self._flush(time.monotonic() if now is None else now)

    def _flush(self, now: float) -> int:
        if now < self.next_try:
            return 0
        delivered = 0
        for path in self.pending():
            try:
                body = restamp(path.read_bytes(), time.time())
                post_body(self.service_url, body, self.secret, self.timeout, self.node)
            except ValueError as exc:
                log.error("spooled batch %s unreadable (%s): dropped", path.name, exc)
                path.unlink(missing_ok=True)
                self.dropped_batches += 1
                continue
            except ReportError as exc:
                if not exc.retriable:
                    log.error("report batch %s refused for good (%s): dropped", path.name, exc)
                    path.unlink(missing_ok=True)
                    self.dropped_batches += 1
                    continue
                self.failures += 1
                delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (self.failures - 1))
                self.next_try = now + delay
                self._failed(now, exc, delay)
                break
            except FileNotFoundError:
                continue  # dropped meanwhile by the spool bound
            except OSError as exc:
                log.error("cannot read spooled batch %s: %s", path, exc)
                break
            path.unlink(missing_ok=True)
            delivered += 1
            self.sent_batches += 1
            self.failures = 0
            self.next_try = 0.0
            if self.failing_since is not None:
                log.warning(
                    "reports delivered again to %s after %.0f s of failures",
                    self.service_url,
                    now - self.failing_since,
                )
                self.failing_since = self._last_alarm = None
        return delivered

    def failing_for(self, now: float | None = None) -> float:
        """Seconds since the first failure of the current outage (0 when delivering)."""
        if self.failing_since is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.failing_since

    def _failed(self, now: float, exc: ReportError, delay: float) -> None:
        if self.failing_since is None:
            self.failing_since = now
            log.warning("report delivery failed (%s); retry in %.0f s", exc, delay)
            return
        log.debug("report delivery failed again (%s); retry in %.0f s", exc, delay)
        failing = now - self.failing_since
        if failing < self.warn_after_s:
            return
        if self._last_alarm is not None and now - self._last_alarm < self.warn_every_s:
            return
        self._last_alarm = now
        log.error(
            "reports to %s have failed for %.0f s (%d attempts, %d batches spooled in %s, "
            "last: %s); check [report] service_url and secret_file here, and that the "
            "service listens on an address this node reaches (docs/admin-guide.md)",
            self.service_url,
            failing,
            self.failures,
            len(self.pending()),
            self.spool,
            exc,
        )

    def send(self, reports: list[JobReport], now: float | None = None) -> int:
        self.enqueue(reports)
        return self.flush(now)


class ReportWorker:
    """Runs a ReportSender on a daemon thread: the agent's loop hands it finished batches
    and never waits on the service (a POST is bounded by `timeout` in all, but the loop
    must not wait even that long: co-location thaws and SIGTERM are due every sample).

    `submit` never blocks: batches wait in a bounded queue (MAX_QUEUED; when full the
    oldest is dropped and logged) until the thread spools them, then the thread flushes
    the spool with the sender's back-off, and again every `poll_s` while batches wait.
    `close` spools what is still queued and gives the thread `grace_s` for a last flush;
    a POST still in flight then is abandoned with the process, its batch stays spooled
    and is sent by the next start."""

    def __init__(self, sender: ReportSender, poll_s: float, max_queued: int = MAX_QUEUED) -> None:
        self.sender = sender
        self.poll_s = poll_s
        self.max_queued = max_queued
        self.dropped_queued = 0  # batches the full queue dropped
        self._queue: deque[list[JobReport]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="report-sender", daemon=True)
        self._thread.start()

    def submit(self, reports: list[JobReport]) -> None:
        if not reports:
            return
        with self._cond:
            if len(self._queue) >= self.max_queued:
                self._queue.popleft()
                self.dropped_queued += 1
                log.warning(
                    "report queue full (%d batches, the sender is stuck): dropped the oldest",
                    self.max_queued,
                )
            self._queue.append(reports)
            self._cond.notify()

    def close(self, grace_s: float) -> None:
        """Spool what is queued, then wait at most `grace_s` for the thread's last flush."""
        with self._cond:
            self._closing = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify()
        self._spool(left)
        self._thread.join(grace_s)
        if self._thread.is_alive():
            log.warning(
                "report POST still in flight after %.1f s: abandoned, %d batches stay in %s",
                grace_s,
                len(self.sender.pending()),
                self.sender.spool,
            )

    def _run(self) -> None:
        closing = False
        while not closing:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closing, timeout=self.poll_s)
                batches = list(self._queue)
                self._queue.clear()
                closing = self._closing
            self._spool(batches)
            try:
                self.sender.flush()
            except Exception:  # a bad batch or bug must not end delivery for good
                log.exception("report flush failed")

    def _spool(self, batches: list[list[JobReport]]) -> None:
        for reports in batches:
            try:
                self.sender.enqueue(reports)
            except OSError as exc:
                log.error(
                    "report spool %s: %s: a batch of %d reports lost",
                    self.sender.spool,
                    exc,
                    len(reports),
                )
