"""The `--server` client: `slurm-ext queue/explain --server URL` read the service's view.

Whatever answers on that port may be hostile (a compromised host, another program on
the port, a proxy gone wrong), and the client runs in a user's terminal: no answer may
crash it, hang it, or be taken for more than it is. So `fetch_queue` and `fetch_job`:
- give the whole exchange (connect, TLS, request, answer) one deadline, `deadline_s`:
  a server that drips its answer a byte at a time is cut off there;
- read only an answer that states its Content-Length (no chunks, no read-to-close), of
  at most `max_bytes`, and that sends all of it: a body cut short is an error, never a
  shorter document;
- parse JSON without NaN or Infinity and with bounded nesting, then check every field
  the commands read (type, finite numbers within MAX_NUMBER, strings of at most
  MAX_TEXT characters, lists of bounded length) and keep only those fields.
Anything else raises ViewError, whose message is one line saying what failed (the
server's own words are not quoted, except a 404's or an error status's first line,
which the caller prints through cli.output.safe).
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import threading
import time
import urllib.parse

import h11

MAX_RESPONSE_BYTES = 64 << 20  # ~150,000 queue rows
MAX_HEAD_BYTES = 64 << 10
MAX_TEXT = 10_000  # characters in one string field
MAX_JOBS = 1_000_000
MAX_LIST = 10_000  # a placement's nodes
MAX_NUMBER = 1e15  # seconds, GPU-seconds, indices: ~31 million years
MAX_INT = 2**53  # job ids, ranks, priorities, counts
DEADLINE_S = 10.0

# what `queue` reads of each row of /v1/queue, and `explain` of /v1/jobs/ID
# (slurm_ext/userview/rows.py queue_row and explain_info make them); "?" allows null
QUEUE_ROW = {
    "job_id": "int", "user": "str", "partition": "str", "state": "str", "state_code": "str",
    "gpus": "int", "rank": "int?", "queue": "int?", "gittins": "num?", "group": "str?",
    "group_samples": "int", "attained_gpu_s": "num", "wait_s": "num?", "run_s": "num?",
    "value_set": "int?", "mode": "str?", "slurm_priority": "int?", "reason": "str",
    "policy_reason": "str", "promoted": "bool",
}  # fmt: skip
LAST_PASS = {
    "id": "int", "started_at": "num", "duration_s": "num", "ranked": "int", "writes": "int",
    "errors": "int", "dry_run": "int",
}  # fmt: skip
JOB_INFO = {
    "job_id": "int", "user": "str", "gpus": "int", "slurm_state": "str",
    "slurm_reason": "str", "slurm_priority": "int?", "managed": "bool", "pinned": "bool",
    "held": "bool?", "rank": "int?", "queue": "int?", "gittins": "num?", "group": "str?",
    "group_samples": "int", "promoted": "bool", "policy_reason": "str",
    "value_set": "int?", "mode": "str?", "placement": "[str]?", "attained_gpu_s": "num",
    "wait_s": "num?", "last_run_s": "num", "current_run_s": "num?", "as_of": "num",
}  # fmt: skip


class ViewError(RuntimeError):
    """The --server view cannot be read: unreachable, too slow, an error status, or an
    answer that is not the view's (the message says which, in one line)."""


class ViewNotFound(ViewError):
    """The server answered 404 (an unknown job, or the view is off)."""


def fetch_queue(
    server: str, deadline_s: float = DEADLINE_S, max_bytes: int = MAX_RESPONSE_BYTES
) -> dict:
    """/v1/queue, checked: {"jobs": [rows with QUEUE_ROW's keys], "last_pass": ...}."""
    url, body = fetch(server, "/v1/queue", deadline_s, max_bytes)
    doc = _object(parse_json(body, url), url)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or len(jobs) > MAX_JOBS:
        raise ViewError(f"{url}: not the service's view: 'jobs' is not a list of jobs")
    last = doc.get("last_pass")
    return {
        "jobs": [_fields(r, QUEUE_ROW, f"{url}: jobs[{i}]") for i, r in enumerate(jobs)],
        "last_pass": None if last is None else _fields(last, LAST_PASS, f"{url}: last_pass"),
    }


def fetch_job(
    server: str, job_id: int, deadline_s: float = DEADLINE_S, max_bytes: int = MAX_RESPONSE_BYTES
) -> dict:
    """/v1/jobs/ID, checked: JOB_INFO's keys, for that job and no other."""
    url, body = fetch(server, f"/v1/jobs/{int(job_id)}", deadline_s, max_bytes)
    info = _fields(parse_json(body, url), JOB_INFO, url)
    if info["job_id"] != job_id:
        raise ViewError(f"{url}: the answer is about job {info['job_id']}, not {job_id}")
    return info


# ---- HTTP -----------------------------------------------------------------------------


def fetch(server: str, path: str, deadline_s: float, max_bytes: int) -> tuple[str, bytes]:
    """(the URL, the body of its 200 answer); ViewNotFound for 404, else ViewError."""
    url = urllib.parse.urlsplit(server)
    try:
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        host = port = None
    if url.scheme not in ("http", "https") or not host or not port:
        raise ViewError(f"--server {server!r}: give http://HOST:PORT (the service's listener)")
    target = url.path.rstrip("/") + path
    full = f"{url.scheme}://{url.netloc}{target}"
    deadline = time.monotonic() + deadline_s
    raw: socket.socket | None = None
    timer: threading.Timer | None = None
    try:
        raw = socket.create_connection((host, port), timeout=deadline_s)
        # every read waits at most until the deadline; the socket is shut just after
        # it, so that the deadline holds inside a TLS handshake too
        timer = threading.Timer(max(0.0, deadline - time.monotonic()) + 0.2, _shut, (raw,))
        timer.daemon = True
        timer.start()
        sock = raw
        if url.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
        head = url.netloc.rpartition("@")[2]
        status, body = _exchange(sock, head, target, deadline, max_bytes, full)
    except ViewError:
        raise
    except (OSError, ValueError, h11.ProtocolError) as exc:
        if time.monotonic() >= deadline - 0.05:
            raise ViewError(f"{full}: no complete answer within {deadline_s:g} s") from exc
        if isinstance(exc, h11.ProtocolError):
            raise ViewError(f"{full}: not an HTTP answer the view sends ({_what(exc)})") from exc
        raise ViewError(f"{full}: cannot reach the service: {exc}") from exc
    finally:
        if timer is not None:
            timer.cancel()
        if raw is not None:
            raw.close()
    if status == 200:
        return full, body
    detail = body[:300].decode("utf-8", "replace").strip().splitlines()
    first = detail[0] if detail else ""
    if status == 404:
        raise ViewNotFound(f"{full}: {first or 'not found'}")
    raise ViewError(f"{full}: HTTP {status}: {first}")


def _exchange(
    sock: socket.socket, host: str, target: str, deadline: float, max_bytes: int, full: str
) -> tuple[int, bytes]:
    """Send the GET, read the answer: (status, body); raises on a malformed, cut or
    oversized answer and at the deadline (TimeoutError)."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
    request = h11.Request(
        method="GET",
        target=target,
        headers=[
            ("Host", host),
            ("Accept", "application/json"),
            ("User-Agent", "slurm-ext"),
            ("Connection", "close"),
        ],
    )
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(conn.send(request) + conn.send(h11.EndOfMessage()))
    status, body = 0, bytearray()
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        if event is h11.NEED_DATA:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data and time.monotonic() >= deadline:
                raise TimeoutError("deadline")  # shut by the timer
            if not data and not status:
                raise ViewError(f"{full}: the server closed the connection without an answer")
            conn.receive_data(data)
        elif isinstance(event, h11.Response):
            status = event.status_code
            _check_length(dict(event.headers), max_bytes, full)
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_bytes:  # h11 holds the server to its Content-Length
                raise ViewError(f"{full}: answer longer than its Content-Length")
    return status, bytes(body)


def _check_length(headers: dict[bytes, bytes], max_bytes: int, full: str) -> None:
    """The answer must state its length (the view always does), within `max_bytes`."""
    if b"transfer-encoding" in headers or b"content-length" not in headers:
        raise ViewError(f"{full}: the answer does not state its Content-Length")
    if int(headers[b"content-length"]) > max_bytes:  # h11 checked it is digits
        raise ViewError(f"{full}: answer larger than {max_bytes} bytes")


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _what(exc: h11.ProtocolError) -> str:
    """h11's reason without the bytes it may quote from the server."""
    return str(exc).split(":")[0][:80]


# ---- JSON -----------------------------------------------------------------------------


def parse_json(body: bytes, url: str) -> object:
    """The body as JSON: no NaN or Infinity, no number beyond a float, bounded nesting."""
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError as exc:
        raise ViewError(f"{url}: not the service's JSON view (nested too deep)") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digits, _finite
        raise ViewError(f"{url}: not the service's JSON view ({_what(exc)})") from exc


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number the view sends")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number beyond a float's range")
    return value


def _object(doc: object, where: str) -> dict:
    if not isinstance(doc, dict):
        raise ViewError(f"{where}: not the service's JSON view (not an object)")
    return doc


def _fields(doc: object, spec: dict[str, str], where: str) -> dict:
    """`doc`'s fields named in `spec`, each checked; no other field is kept."""
    doc = _object(doc, where)
    out = {}
    for key, kind in spec.items():
        if key not in doc:
            raise ViewError(f"{where}: not the service's JSON view (no {key!r})")
        value = doc[key]
        if not _fits(value, kind):
            raise ViewError(f"{where}: {key!r} is not {_KINDS[kind.rstrip('?')]}")
        out[key] = value
    return out


_KINDS = {
    "int": f"a whole number within {MAX_INT:.0e}",
    "num": f"a finite number within {MAX_NUMBER:.0e}",
    "str": f"a string of at most {MAX_TEXT} characters",
    "bool": "true or false",
    "[str]": f"a list of at most {MAX_LIST} strings",
}


def _fits(value: object, kind: str) -> bool:
    if kind.endswith("?"):
        return value is None or _fits(value, kind[:-1])
    if kind == "int":
        return type(value) is int and abs(value) <= MAX_INT
    if kind == "num":
        return type(value) in (int, float) and abs(value) <= MAX_NUMBER  # finite: parse_json
    if kind == "str":
        return type(value) is str and len(value) <= MAX_TEXT
    if kind == "bool":
        return type(value) is bool
    if kind == "[str]":
        return (
            type(value) is list and len(value) <= MAX_LIST and all(_fits(v, "str") for v in value)
        )
    raise ValueError(f"unknown field kind {kind!r}")
