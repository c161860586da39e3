"""One HTTP(S) POST that ends by a deadline, whatever the server does.

A socket timeout bounds each receive, not the exchange: a server that drips its answer
a byte a second, or sends an endless header, holds a plain `urllib` POST for ever. Here
the connect, the send and every receive of the answer wait at most until one deadline,
the answer is read up to a bound, and every way the exchange can fail is one exception.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
import urllib.parse
from dataclasses import dataclass


class ExchangeFailed(Exception):
    """The POST did not get a whole answer by its deadline (no connection, a timeout, a
    broken or truncated answer, one longer than allowed)."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    body: bytes  # empty unless the status is 2xx


def post(
    url: str, body: bytes, headers: dict[str, str], timeout_s: float, max_answer: int
) -> Answer:
    """POST `body` to `url` and read the answer, all within `timeout_s`; a 2xx answer's
    body is read up to `max_answer` bytes (more is ExchangeFailed), another's not at all."""
    deadline = time.monotonic() + timeout_s
    parts = urllib.parse.urlsplit(url)
    cls = _HttpsConnection if parts.scheme == "https" else _HttpConnection
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn = cls(parts.hostname or "", parts.port, deadline=deadline)
        try:
            conn.request("POST", path or "/", body, headers)
            resp = conn.getresponse()
            answer = _read(resp, max_answer) if 200 <= resp.status < 300 else b""
            return Answer(resp.status, resp.reason, answer)
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        # ValueError: a URL http.client cannot take (a bad port)
        raise ExchangeFailed(f"{type(exc).__name__}: {exc}") from exc


def _read(resp: http.client.HTTPResponse, max_answer: int) -> bytes:
    if resp.length is not None and resp.length > max_answer:
        raise ExchangeFailed(f"answer of {resp.length} bytes, more than {max_answer}")
    # with a length, read() raises IncompleteRead on a short answer; without, stop past the bound
    data = resp.read() if resp.length is not None else resp.read(max_answer + 1)
    if len(data) > max_answer:
        raise ExchangeFailed(f"answer longer than {max_answer} bytes")
    return data


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no whole answer within the deadline")
    return left


class _DeadlineMixin:
    """Connect and send with what is left of the deadline; the answer is read through
    `_Receiver`, which does the same for each receive."""

    deadline: float
    sock: socket.socket | None
    timeout: float | None

    def connect(self) -> None:
        self.timeout = _left(self.deadline)
        super().connect()  # type: ignore[misc]

    def send(self, data: bytes) -> None:
        if self.sock is None:
            self.connect()
        self.sock.settimeout(_left(self.deadline))  # type: ignore[union-attr]
        super().send(data)  # type: ignore[misc]

    def response_class(self, sock: socket.socket, *args, **kwargs) -> http.client.HTTPResponse:
        """What `getresponse` builds: an HTTPResponse reading through the deadline."""
        return http.client.HTTPResponse(_AnswerSocket(sock, self.deadline), *args, **kwargs)


class _HttpConnection(_DeadlineMixin, http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, deadline: float) -> None:
        super().__init__(host, port, timeout=_left(deadline))
        self.deadline = deadline


class _HttpsConnection(_DeadlineMixin, http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, deadline: float) -> None:
        super().__init__(host, port, timeout=_left(deadline))
        self.deadline = deadline


class _AnswerSocket:
    """The socket as HTTPResponse uses it: only `makefile`, whose reads keep the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Receiver(self.sock, self.deadline))


class _Receiver(io.RawIOBase):
    """The socket's bytes, each receive waiting at most until the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self.sock, self.deadline = sock, deadline
        self.raw = sock.makefile("rb", buffering=0)  # holds the socket open, as http.client's does

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int | None:  # type: ignore[override]
        self.sock.settimeout(_left(self.deadline))
        return self.raw.readinto(buffer)

    def close(self) -> None:
        self.raw.close()
        super().close()
