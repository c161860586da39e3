"""The service's report endpoint under a hostile, unauthenticated client.

Starts a local Slurm cluster and the real service (`slurm-ext serve`) on loopback, then
holds 100 connections that never finish their request head and 20 that announce the
largest body allowed, send all of it but one byte and stall. Meanwhile an agent's signed
report batch is posted every second. Prints the service's RSS and thread count (from
/proc/PID/status) before, at peak and after, the stated bound, and how many signed
reports were accepted and how fast. Loopback only; bounded in count (120 sockets) and
time (`--seconds`, default 40: past the listener's 30 s body deadline).

    .venv/bin/python -m benchmarks.bench_report_listener [--seconds 40]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_ext.core.reports import SIGNATURE_HEADER, JobReport, encode_reports, sign
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


def post_signed(port: int, secret: bytes, job: int) -> tuple[int, float]:
    body = encode_reports("node1", [report(job)])
    t0 = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(
            "POST", "/v1/reports", body=body, headers={SIGNATURE_HEADER: sign(body, secret)}
        )
        code = conn.getresponse().status
        conn.close()
    except OSError:
        code = 0
    return code, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0)
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

        for _ in range(STALLED_HEADS):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n")
            sockets.append(s)
        for _ in range(STALLED_BODIES):
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            head = (
                f"POST /v1/reports HTTP/1.1\r\nContent-Length: {body_bytes}\r\n"
                f"{SIGNATURE_HEADER}: {'0' * 64}\r\n\r\n"
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
