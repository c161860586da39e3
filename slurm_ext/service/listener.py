"""The service's one HTTP listener: `GET /metrics`, signed `POST /v1/reports`, and the
read-only user view (`GET /`, `/v1/queue`, `/v1/jobs/ID`: slurm_ext/userview/http.py).

Anyone who can reach the port is hostile until the signature says otherwise, so every
cost a client can cause is bounded before the body is read: one event-loop thread holds
all connections (a stalled client costs a socket and a small buffer, not a thread), at
most `max_connections` are open at once and at most `max_per_client` from one client
address (an IPv6 /64) (more get 503 and are closed), the last `report_share` of
those connections are kept for report posts (a connection accepted into them must
send, within `reserve_header_timeout_s`, a head with a report's shape: POST to the
reports path, a node name and a signature of the right form; else 503), the request line
and headers must arrive within `header_timeout_s` and fit `max_header_bytes`, the
signature header must have the shape of one, the body must be at most `max_body` bytes
and arrive within `body_timeout_s`, and at most `max_large_bodies` bodies over
`small_body` bytes are read at once. Only complete, well-formed requests reach the
`workers` threads that verify, decode and store. See docs/admin-guide.md, "Failure modes".

h11 parses the requests (HTTP/1.1 as RFC 9112 has it: an HTTP/1.1 request must name its
Host); a report's body must state its Content-Length (chunked bodies are not read).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import h11
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from slurm_ext.core.model import JobState
from slurm_ext.core.reports import (
    NODE_HEADER,
    REPORTS_PATH,
    SIGNATURE_HEADER,
    JobReport,
    decode_batch,
    node_key,
    node_name_ok,
    signature_shape_ok,
    verify,
)

log = logging.getLogger("slurm_ext.service.loop")
T = TypeVar("T")

# job id -> the nodes Slurm ran it on, or None when Slurm no longer knows the job;
# raises OSError (or SlurmError) when Slurm cannot be asked
JobNodes = Callable[[set[int]], dict[int, tuple[str, ...] | None]]


@dataclass(frozen=True)
class ListenerLimits:
    """Bounds on what one client, or all of them together, can make the listener hold."""

    max_connections: int = 128
    max_per_client: int = 16  # open connections one client address (an IPv6 /64) may hold
    report_share: float = 0.25  # of max_connections, kept for heads with a report's shape
    reserve_header_timeout_s: float = 2.0  # an agent sends its head at once
    max_header_bytes: int = 16 * 1024
    header_timeout_s: float = 10.0
    max_body: int = 1024 * 1024  # an agent's batch is ~0.5 KB per job
    small_body: int = 64 * 1024
    max_large_bodies: int = 4
    body_timeout_s: float = 30.0
    workers: int = 4  # threads that verify, decode and store complete requests
    sent_at_window_s: float = 600.0  # |service clock - body's sent_at| allowed

    def memory_bound(self) -> int:
        """Bytes of request data held at most: headers and small bodies of every open
        connection plus the large bodies in flight."""
        return (
            self.max_connections * (2 * self.max_header_bytes + self.small_body)
            + self.max_large_bodies * self.max_body
        )


@dataclass(frozen=True)
class Outcome:
    code: int
    body: bytes
    ctype: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers


class ReportListener:
    """Runs the listener on its own event-loop thread; `shutdown()` stops it."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics,
        secret: bytes | None,
        on_reports: Callable[[list[JobReport]], int],
        job_nodes: JobNodes | None = None,
        limits: ListenerLimits | None = None,
        wall: Callable[[], float] = time.time,
        view=None,
    ) -> None:
        """`view`: the user view (slurm_ext.userview.http.UserView), or None for no view."""
        self.metrics = metrics
        self.secret = secret
        self.on_reports = on_reports
        self.job_nodes = job_nodes
        self.limits = limits or ListenerLimits()
        self.wall = wall
        self.view = view
        self.open_connections = 0
        self._per_client: dict[str, int] = {}  # open connections per client_key
        self._large = 0
        self._sock = listen_socket(host, port)
        self.server_address = self._sock.getsockname()
        self.server_port = self.server_address[1]
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="slurm-ext-req")
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slurm-ext-http", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    # ---- lifecycle -----------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            # the stream buffers at most 2 x limit before it stops reading the socket:
            # with h11's buffer (max_header_bytes), 2 x max_header_bytes for a head
            asyncio.start_server(
                self._handle, sock=self._sock, limit=self.limits.max_header_bytes // 2
            )
        )
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def shutdown(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:  # the ThreadingHTTPServer name, for callers of either
        self.shutdown()

    # ---- one connection ------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lim = self.limits
        client = client_key(writer.get_extra_info("peername"))
        held = self._per_client.get(client, 0)
        if self.open_connections >= lim.max_connections or held >= lim.max_per_client:
            self._refuse("busy" if held < lim.max_per_client else "client")
            await self._send(writer, Outcome(503, b"too many connections, retry later\n"))
            return
        # past the general share: this connection may only carry a report
        reserved = self.open_connections >= lim.max_connections * (1.0 - lim.report_share)
        self.open_connections += 1
        self._per_client[client] = held + 1
        try:
            out = await self._serve(reader, writer, client, reserved)
            if out is not None:
                await self._send(writer, out)
        except ConnectionError:
            pass
        finally:
            self.open_connections -= 1
            if (left := self._per_client.pop(client) - 1) > 0:
                self._per_client[client] = left
            writer.close()

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: str = "",
        reserved: bool = False,
    ) -> Outcome | None:
        """The answer to the connection's one request; None: send nothing, close.
        `reserved`: the connection holds one of the slots kept for reports."""
        lim = self.limits
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=lim.max_header_bytes)
        wait = lim.reserve_header_timeout_s if reserved else lim.header_timeout_s
        try:
            async with asyncio.timeout(wait):
                request = await _read_head(http, reader, lim.max_header_bytes)
        except TimeoutError:
            self._refuse("timeout")
            return Outcome(408, b"incomplete request head\n")
        except h11.RemoteProtocolError as exc:  # malformed, too large, or no Host
            self._refuse("headers")  # (h11's message may quote the client: not sent back)
            too_large = exc.error_status_hint == 431
            text = b"request head too large\n" if too_large else b"malformed request head\n"
            return Outcome(exc.error_status_hint, text)
        if request is None:  # closed before the head was complete
            self._refuse("headers")
            return None
        if not request.http_version.startswith(b"1."):  # h11 takes any x.y
            self._refuse("headers")
            return Outcome(400, b"malformed request head: HTTP/1.x only\n")
        method = request.method.decode("ascii")
        path = request.target.decode("ascii").split("?")[0]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
        if reserved and not _report_shaped(method, path, headers):
            self._refuse("busy")
            return Outcome(503, b"busy: connections left are kept for node reports\n")
        if method == "GET" and path == "/metrics":
            text = await self._in_pool(generate_latest, self.metrics.registry)
            return Outcome(200, text, CONTENT_TYPE_LATEST)
        if self.view is not None and (answer := await self.view.answer(method, path, client)):
            return answer
        if method != "POST" or path != REPORTS_PATH:
            return Outcome(404, b"not found\n")
        peer = str((writer.get_extra_info("peername") or ("?",))[0])
        early = self._check_before_body(headers, peer)
        if isinstance(early, Outcome):
            return early
        body = await self._read_body(http, reader, early)
        if isinstance(body, Outcome):
            return body
        if body is None:
            return None
        signature = headers[SIGNATURE_HEADER.lower()]
        node = headers.get(NODE_HEADER.lower(), "")
        return await self._in_pool(self._process, body, signature, node, peer)

    async def _read_body(
        self, http: h11.Connection, reader: asyncio.StreamReader, length: int
    ) -> bytes | Outcome | None:
        """The body of `length` bytes; an Outcome when refused (too many large bodies in
        flight), None when it did not all arrive in time."""
        lim = self.limits
        large = length > lim.small_body
        if large and self._large >= lim.max_large_bodies:
            self._refuse("busy")
            return Outcome(503, b"busy, retry later\n")
        self._large += int(large)
        try:
            async with asyncio.timeout(lim.body_timeout_s):
                return await _read_data(http, reader, length, lim.small_body)
        except (TimeoutError, EOFError, h11.RemoteProtocolError) as exc:
            self._refuse("timeout" if isinstance(exc, TimeoutError) else "incomplete")
            return None
        finally:
            self._large -= int(large)

    def _check_before_body(self, headers: dict[str, str], peer: str) -> Outcome | int:
        """What can be refused without reading the body; else the body's length."""
        if self.secret is None:
            self._refuse("no_secret")
            return Outcome(503, b"reports disabled: service has no report_secret_file\n")
        raw = headers.get("content-length", "")  # h11 checked it is digits
        chunked = "transfer-encoding" in headers  # a length is required, chunks are not read
        length = int(raw) if raw and not chunked and len(raw) < 19 else -1
        if not 0 < length <= self.limits.max_body:
            self._refuse("size")
            code = 413 if length > self.limits.max_body else 411
            return Outcome(code, b"bad content length\n")
        node = headers.get(NODE_HEADER.lower())
        if node is not None and not node_name_ok(node):
            self._refuse("headers")
            return Outcome(400, f"bad {NODE_HEADER} header\n".encode())
        if not signature_shape_ok(headers.get(SIGNATURE_HEADER.lower())):
            self._refuse("signature")
            log.warning("refused reports from %s: bad or missing signature", peer)
            return Outcome(401, b"bad signature\n")
        return length

    async def _in_pool(self, fn, *args):
        return await self._loop.run_in_executor(self._pool, fn, *args)

    async def _send(self, writer: asyncio.StreamWriter, out: Outcome) -> None:
        head = (
            f"HTTP/1.1 {out.code} {_REASONS.get(out.code, 'Error')}\r\n"
            f"Content-Type: {out.ctype}\r\nContent-Length: {len(out.body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in out.headers)
            + "Connection: close\r\n\r\n"
        ).encode()
        # a client that never reads cannot hold us: the whole answer must be taken within
        # header_timeout_s (body_timeout_s for a large one), and a large answer (the user
        # view's queue) goes out in chunks, so each connection buffers at most one chunk
        # of the shared bytes rather than a copy of all of them
        large = len(out.body) > self.limits.small_body
        body = memoryview(out.body)
        try:
            async with asyncio.timeout(
                self.limits.body_timeout_s if large else self.limits.header_timeout_s
            ):
                writer.write(head)
                for at in range(0, len(body), self.limits.small_body):
                    writer.write(body[at : at + self.limits.small_body])
                    await writer.drain()
                await writer.drain()
        except TimeoutError:  # drop what is still buffered: close() would wait to send it
            writer.transport.abort()
        except ConnectionError:
            pass
        writer.close()

    def _refuse(self, reason: str) -> None:
        self.metrics.reports_refused.labels(reason=reason).inc()

    # ---- a complete request, on a worker thread -------------------------------------------
    def _process(self, body: bytes, signature: str, node: str, peer: str) -> Outcome:
        """Signed with the shared secret (any node name), or with the key of the node
        the header names (`node_key`: then the body must name that node too)."""
        assert self.secret is not None
        by_node = False
        if not verify(body, self.secret, signature):
            by_node = bool(node) and verify(body, node_key(self.secret, node), signature)
            if not by_node:
                self._refuse("signature")
                log.warning("refused reports from %s: bad or missing signature", peer)
                return Outcome(401, b"bad signature\n")
        try:
            batch = decode_batch(body)
        except ValueError as exc:
            self._refuse("malformed")
            return Outcome(400, f"malformed reports: {exc}\n".encode())
        if by_node and batch.node != node:
            self._refuse("signature")
            log.warning("refused reports from %s: %s's key signed node %r", peer, node, batch.node)
            return Outcome(401, b"the body names another node than the key that signed it\n")
        skew = self.wall() - batch.sent_at
        if not abs(skew) <= self.limits.sent_at_window_s:
            self._refuse("stale")
            log.warning("refused reports from %s: sent_at %.0f s off this clock", batch.node, skew)
            return Outcome(403, b"sent_at outside the accepted window (check clocks)\n")
        try:
            reports, foreign = self._bound_to_node(batch.node, batch.reports)
        except Exception as exc:  # Slurm could not say where the jobs ran: retry later
            log.error("cannot check where reported jobs ran: %s", exc)
            self._refuse("slurm")
            return Outcome(503, b"cannot check the jobs' nodes now, retry later\n")
        try:
            n = self.on_reports(reports) if reports else 0
        except Exception as exc:  # the store failed: tell the agent to retry later
            log.error("could not store %d reports: %s", len(reports), exc)
            self._refuse("store")
            return Outcome(503, b"store unavailable, retry later\n")
        self.metrics.reports.inc(len(reports))
        doc = f'{{"accepted": {n}, "refused_jobs": {sorted(foreign)}}}\n'
        return Outcome(200, doc.encode(), "application/json")

    def _bound_to_node(
        self, node: str, reports: list[JobReport]
    ) -> tuple[list[JobReport], set[int]]:
        """Keep reports for jobs Slurm ran on `node` (or no longer knows); a job Slurm ran
        elsewhere is refused, counted and logged, and the rest of the batch is kept."""
        if self.job_nodes is None or not reports:
            return reports, set()
        where = self.job_nodes({r.job_id for r in reports})
        foreign = {
            r.job_id
            for r in reports
            if (nodes := where.get(r.job_id)) is not None and node not in nodes
        }
        if foreign:
            self.metrics.reports_refused.labels(reason="node").inc(len(foreign))
            log.warning(
                "refused reports from %s for jobs %s: Slurm ran them elsewhere",
                node,
                sorted(foreign),
            )
        return [r for r in reports if r.job_id not in foreign], foreign


class SlurmJobNodes:
    """`JobNodes` from one `squeue` for every job Slurm still holds, cached `cache_s` so
    a report storm from many nodes asks Slurm at most once per `cache_s`. A job with no
    nodes (pending, requeued) or unknown to Slurm is None: not checkable, accepted."""

    def __init__(self, client, cache_s: float = 5.0) -> None:
        self.client = client
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._nodes: dict[int, tuple[str, ...]] = {}
        self._at = float("-inf")

    def __call__(self, job_ids: set[int]) -> dict[int, tuple[str, ...] | None]:
        with self._lock:
            age = time.monotonic() - self._at
            if age >= self.cache_s or (age >= 1.0 and not job_ids <= set(self._nodes)):
                jobs = self.client.jobs(states=_ALL_STATES)
                self._nodes = {j.job_id: tuple(j.nodes) for j in jobs if j.nodes}
                self._at = time.monotonic()
            return {j: self._nodes.get(j) for j in job_ids}


_ALL_STATES = tuple(s.value for s in JobState)


class ListenAddressError(ValueError):
    """The listener's `key` (listen or port) cannot work on this host: restarting the
    service cannot fix it, the config must change."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening socket on `host` (an address or a name; IPv4 preferred) and `port`.
    Raises ListenAddressError when `host` does not resolve or is not an address of this
    host, or the port needs privileges; OSError (EADDRINUSE) when the port is taken."""
    name = host.strip("[]")
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise ListenAddressError("listen", f"{host!r} does not resolve ({exc})") from exc
    family, _, _, _, address = min(found, key=lambda f: f[0] != socket.AF_INET)
    try:
        return socket.create_server(address, family=family, backlog=128)
    except OSError as exc:
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise ListenAddressError(
                "listen", f"{host!r} is not an address of this host ({exc.strerror})"
            ) from exc
        if exc.errno == errno.EACCES:
            raise ListenAddressError(
                "port", f"port {port} needs privileges this user lacks ({exc.strerror})"
            ) from exc
        raise


def bind_retrying(start: Callable[[], T], wait_s: float, sleep=time.sleep) -> T:
    """`start()`; while it finds the port taken (EADDRINUSE), again after 1, 2, 4, ...
    s (at most 15 s apart) for `wait_s` seconds in all, then its error is raised. A port
    held for a while (an old process still closing, another user's process) is waited
    out here; what holds it for good is left to the service manager's restarts."""
    pause, waited = 1.0, 0.0
    while True:
        try:
            return start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or waited >= wait_s:
                raise
            step = min(pause, wait_s - waited)
            log.warning("listener: the port is taken (%s); trying again in %.0f s", exc, step)
            sleep(step)
            waited += step
            pause = min(2 * pause, 15.0)


def client_key(peer: object) -> str:
    """Whose connection this is, for the per-client caps: the peer's IPv4 address, or
    the /64 of an IPv6 one (a single host is commonly given a whole /64)."""
    host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _report_shaped(method: str, path: str, headers: dict[str, str]) -> bool:
    """The head of a node agent's report: POST to the reports path with a node name and
    a signature of the right form (what an agent sends; checked before any body)."""
    node = headers.get(NODE_HEADER.lower())
    return (
        method == "POST"
        and path == REPORTS_PATH
        and node is not None
        and node_name_ok(node)
        and signature_shape_ok(headers.get(SIGNATURE_HEADER.lower()))
    )


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
}


async def _read_head(
    http: h11.Connection, reader: asyncio.StreamReader, max_bytes: int
) -> h11.Request | None:
    """The request line and headers, parsed by h11 (raises h11.RemoteProtocolError when
    malformed or over `max_bytes`); None when the client closed first. Reads at most
    `max_bytes` + 1 bytes, so h11's buffer holds no more than that."""
    fed = 0
    while (event := http.next_event()) is h11.NEED_DATA:
        data = await reader.read(max_bytes + 1 - fed)
        if not data:
            return None
        fed += len(data)
        http.receive_data(data)
    return event if isinstance(event, h11.Request) else None


async def _read_data(
    http: h11.Connection, reader: asyncio.StreamReader, length: int, chunk: int
) -> bytes:
    """The `length`-byte body after the head, read `chunk` bytes at a time (raises
    EOFError when the client closes first)."""
    body = bytearray()
    while not isinstance(event := http.next_event(), h11.EndOfMessage):
        if event is h11.NEED_DATA:
            data = await reader.read(min(chunk, length - len(body)))
            if not data:
                raise EOFError
            http.receive_data(data)
        elif isinstance(event, h11.Data):
            body += event.data
    return bytes(body)
