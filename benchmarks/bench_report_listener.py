"""The service's report endpoint under a hostile, unauthenticated client.

Starts a local Slurm cluster and the real service (`slurm-ext serve`) on loopback, then
holds 100 connections that never finish their request head and 20 that announce the
largest body allowed, send all of it but one byte and stall, spread over 10 client
addresses (127.0.1.x: one address may hold only 16 connections). Meanwhile an agent's
signed report batch is posted every second. Prints the service's RSS and thread count
(from /proc/PID/status) before, at peak and after, the stated bound, and how many signed
reports were accepted and how fast. Loopback only; bounded in count (120 sockets) and
time (`--seconds`, default 40: past the listener's 30 s body deadline).

Then the flood: one address (127.0.3.1) keeps the listener's whole cap (128 sockets)
open, never finishing a head, and replaces each one the service answers or cuts at
once, for `--flood-seconds` (default 10); meanwhile a node (127.0.0.2) posts signed
reports 10 times a second and a user (127.0.0.3) asks the view 4 times a second.
Prints how many of each were served and how fast.

    .venv/bin/python -m benchmarks.bench_report_listener [--seconds 40] [--flood-seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_ext.core.reports import NODE_HEADER, SIGNATURE_HEADER, JobReport, encode_reports, sign
from slurm_ext.service.listener import ListenerLimits
from slurm_ext.testing.cluster import LocalCluster

STALLED_HEADS, STALLED_BODIES = 100, 20


def status(pid: int) -> tuple[float, int]:
    """(RSS in MiB, threads) of a process."""
    rss, threads = 0.0, 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(job: int) -> JobReport:
    now = time.time()
    return JobReport(
        "node1",
        job,
        60.0,
        0.5,
        0.9,
        2**30,
        4,
        1.0,
        1000.0,
        100.0,
        ("GPU-x",),
        "H100",
        12,
        now - 60,
        now,
    )


def post_signed(port: int, secret: bytes, job: int, source: str = "127.0.0.1") -> tuple[int, float]:
    """An agent's post (it names its node, as agents do), from `source`: (status, s)."""
    body = encode_reports("node1", [report(job)])
    headers = {SIGNATURE_HEADER: sign(body, secret), NODE_HEADER: "node1"}
    return request(port, source, "POST", "/v1/reports", body, headers)


def request(
    port: int, source: str, method: str, path: str, body: bytes | None = None, headers=None
) -> tuple[int, float]:
    t0 = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        code = resp.status
        conn.close()
    except OSError:
        code = 0
    return code, time.monotonic() - t0


def connect(port: int, i: int) -> socket.socket:
    """The i-th stalled connection, from one of 10 addresses (12 each, under the cap)."""
    return socket.create_connection(
        ("127.0.0.1", port), source_address=(f"127.0.1.{i % 10 + 1}", 0)
    )


def flood(port: int, secret: bytes, seconds: float, cap: int) -> None:
    """One address holds the whole cap, reconnecting; a node reports, a user asks."""
    stop = threading.Event()
    opened = [0]

    def flooder() -> None:
        """Keep `cap` connections open, each with a head never finished; one the service
        answers (503) or cuts (408) is replaced at once."""
        sel = selectors.DefaultSelector()
        while not stop.is_set():
            while len(sel.get_map()) < cap:
                try:
                    s = socket.create_connection(
                        ("127.0.0.1", port), timeout=1, source_address=("127.0.3.1", 0)
                    )
                    s.sendall(b"GET /v1/queue HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    break
                sel.register(s, selectors.EVENT_READ)
                opened[0] += 1
            for key, _ in sel.select(timeout=0.05):
                sel.unregister(key.fileobj)
                key.fileobj.close()
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()

    results: dict[str, list[tuple[int, float]]] = {"reports": [], "view": []}

    def node() -> None:
        job = 10_000
        while not stop.is_set():
            job += 1
            results["reports"].append(post_signed(port, secret, job, "127.0.0.2"))
            time.sleep(0.1)  # 10 a second: many nodes' agents (each posts every 30 s)

    def user() -> None:
        while not stop.is_set():
            results["view"].append(request(port, "127.0.0.3", "GET", "/v1/queue"))
            time.sleep(0.25)  # 4 a second: under the view's 5 a second per address

    threads = [threading.Thread(target=f, daemon=True) for f in (flooder, node, user)]
    threads[0].start()
    time.sleep(1.0)  # the flood holds the listener before anyone else asks
    for t in threads[1:]:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    print(
        f"flood: one address keeps {cap} sockets reconnecting ({opened[0]} connections in {seconds + 1:.0f} s)"
    )
    for what, got in results.items():
        ok = [took for code, took in got if code == 200]
        worst = max((took for _, took in got), default=0.0)
        others = sorted({code for code, _ in got} - {200})
        print(
            f"flood: {what} from another address served {len(ok)}/{len(got)}, "
            f"median {1000 * sorted(ok)[len(ok) // 2] if ok else 0:.0f} ms, slowest {worst * 1000:.0f} ms"
            + (f" (other statuses: {others})" if others else "")
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--flood-seconds", type=float, default=10.0)
    ap.add_argument(
        "--body-bytes", type=int, default=None, help="announced body size (default: the cap)"
    )
    args = ap.parse_args()
    limits = ListenerLimits()
    body_bytes = args.body_bytes or limits.max_body
    root = Path(tempfile.mkdtemp(prefix="bench-listener-"))
    cluster = LocalCluster(root=root / "cluster", nodes=1, gpus_per_node=1)
    cluster.start()
    service = None
    sockets: list[socket.socket] = []
    try:
        secret = os.urandom(16).hex().encode()
        (root / "secret").write_bytes(secret)
        (root / "secret").chmod(0o600)
        port = free_port()
        (root / "service.toml").write_text(
            f'interval_s = 5.0\nstore = "{root / "service.db"}"\nport = {port}\n'
            f'report_secret_file = "{root / "secret"}"\n'
            f'[slurm]\nbackend = "cli"\nslurm_conf = "{cluster.conf_path}"\n'
        )
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "slurm_ext.cli",
                "serve",
                "--config",
                str(root / "service.toml"),
            ],
            stdout=open(root / "service.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while post_signed(port, secret, 1)[0] != 200:
            if time.monotonic() > deadline or service.poll() is not None:
                raise SystemExit(f"service did not come up; see {root / 'service.log'}")
            time.sleep(0.5)
        time.sleep(1.0)
        base_rss, base_threads = status(service.pid)

        for i in range(STALLED_HEADS):
            s = connect(port, i)
            s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n")
            sockets.append(s)
        for i in range(STALLED_BODIES):
            s = connect(port, STALLED_HEADS + i)
            s.setblocking(False)
            head = (
                f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: {body_bytes}\r\n"
                f"{SIGNATURE_HEADER}: {'0' * 64}\r\n{NODE_HEADER}: node1\r\n\r\n"
            ).encode()
            data = head + b"x" * (body_bytes - 1)
            sent = 0
            t_end = time.monotonic() + 5
            while sent < len(data) and time.monotonic() < t_end:
                try:
                    sent += s.send(data[sent:])
                except BlockingIOError:
                    time.sleep(0.01)
                except OSError:
                    break  # refused (503) and closed: that is the bound at work
            sockets.append(s)

        peak_rss, peak_threads = base_rss, base_threads
        ok, tried, worst = 0, 0, 0.0
        t_end = time.monotonic() + args.seconds
        job = 100
        while time.monotonic() < t_end:
            job += 1
            code, took = post_signed(port, secret, job)
            tried += 1
            ok += code == 200
            worst = max(worst, took)
            rss, threads = status(service.pid)
            peak_rss, peak_threads = max(peak_rss, rss), max(peak_threads, threads)
            time.sleep(max(0.0, 1.0 - took))
        closed = 0
        answered = 0
        for s in sockets:
            s.setblocking(False)
            try:
                while chunk := s.recv(65536):  # an answer (408, 503), then EOF
                    answered += chunk.startswith(b"HTTP/1.1 ")
                closed += 1
            except BlockingIOError:
                pass  # still open
            except OSError:
                closed += 1
        end_rss, end_threads = status(service.pid)
        bound_mib = limits.memory_bound() / 2**20
        print(
            f"stalled connections: {STALLED_HEADS} heads + {STALLED_BODIES} bodies of {body_bytes} B"
        )
        print(f"service RSS MiB:   before {base_rss:.1f}  peak {peak_rss:.1f}  after {end_rss:.1f}")
        print(f"service threads:   before {base_threads}  peak {peak_threads}  after {end_threads}")
        print(
            f"bound: request data <= {bound_mib:.1f} MiB "
            f"({limits.max_connections} connections x (2 x {limits.max_header_bytes // 1024} KiB "
            f"head + {limits.small_body // 1024} KiB) + {limits.max_large_bodies} x "
            f"{limits.max_body // 2**20} MiB bodies); listener threads <= "
            f"1 event loop + {limits.workers} workers, whatever the clients do"
        )
        print(f"peak RSS growth: {peak_rss - base_rss:.1f} MiB ({peak_rss / base_rss:.2f}x)")
        print(f"signed reports accepted while stalled: {ok}/{tried}, slowest {worst * 1000:.0f} ms")
        print(
            f"stalled connections closed by the service within {args.seconds:.0f} s: {closed}/{len(sockets)}"
        )
        for s in sockets:
            s.close()
        flood(port, secret, args.flood_seconds, limits.max_connections)
        return 0 if ok == tried else 1
    finally:
        for s in sockets:
            s.close()
        if service is not None and service.poll() is None:
            service.terminate()
            service.wait(15)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
