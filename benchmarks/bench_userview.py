"""The user view's cost, and whether a request storm slows the service's pass.

(a) one rebuild of the view (store read + JSON + HTML) for a queue of N jobs;
(b) `Service.run_pass` (replay client, real SQLite store) timed with no clients; with
    `--clients` client processes fetching a path the view does not serve (404: what the
    clients and the listener cost on this machine's CPUs); and with them fetching `/`,
    `/v1/queue` and `/v1/jobs/ID` as fast as they can. Prints the medians, their ratios,
    the answers served and the store reads the view made (at most one per refresh_s,
    however many requests). The clients are separate processes, as real users are; on a
    machine with few cores they compete with the pass for CPU either way.

    .venv/bin/python benchmarks/bench_userview.py [--pending 5000] [--running 1000]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import snapshot  # noqa: E402

from slurm_ext.metrics import ServiceMetrics, serve_http  # noqa: E402
from slurm_ext.service import Service, ServiceConfig  # noqa: E402
from slurm_ext.store import Store  # noqa: E402
from slurm_ext.testing.replay import ReplayClient  # noqa: E402
from slurm_ext.userview_http import UserView  # noqa: E402


def hammer(port: int, seconds: float, job_ids: list[int] | None, out) -> None:
    """One client: GET the view's three kinds of answer in turn until `seconds` pass."""
    paths = ["/", "/v1/queue"] + [f"/v1/jobs/{j}" for j in job_ids] if job_ids else ["/nope"]
    n, i, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", paths[i % len(paths)])
        resp = conn.getresponse()
        resp.read()
        conn.close()
        n += resp.status in (200, 404)
        i += 1
    out.put(n)


def time_passes(svc: Service, passes: int, now: float) -> list[float]:
    out = []
    for k in range(passes):
        t0 = time.perf_counter()
        svc.run_pass(now=now + k)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--running", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    jobs, nodes, now = snapshot(args.pending, args.running)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ServiceConfig(store=str(Path(tmp) / "s.db"), port=0, history_source="store")
        store = Store(cfg.store)
        svc = Service(cfg, ReplayClient(jobs, nodes), store)
        svc.run_pass(now=now)  # first pass: every record and decision written
        view = UserView(cfg.store, refresh_s=5.0)
        builds = []
        for _ in range(3):
            t0 = time.perf_counter()
            built = view.build()
            builds.append(time.perf_counter() - t0)
        print(f"jobs {len(jobs)}: view rebuild (store read + JSON + HTML) median "
              f"{statistics.median(builds) * 1000:.0f} ms; /v1/queue {len(built.queue) / 1e6:.2f} MB,"
              f" page {len(built.page) / 1e6:.2f} MB")  # fmt: skip
        alone = time_passes(svc, args.passes, now + 100)
        server = serve_http("127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, view=view)
        view.reads = 0
        seconds = 2.0 + statistics.median(alone) * args.passes * 3
        ids = [j.job_id for j in jobs[:: max(1, len(jobs) // 50)]]
        # the same storm on a path the view does not serve (404): what the clients and the
        # listener cost on this machine's CPUs without the view
        busy404, _ = storm(svc, server.server_port, args, seconds, None, now + 200)
        busy, served = storm(svc, server.server_port, args, seconds, ids, now + 300)
        server.shutdown()
        view.close()
        store.close()
    a, b, c = (statistics.median(x) for x in (alone, busy, busy404))
    print(f"pass median: alone {a * 1000:.0f} ms; during a 404 storm {c * 1000:.0f} ms "
          f"(ratio {c / a:.2f}); during a view storm {b * 1000:.0f} ms (ratio {b / a:.2f}, "
          f"{b / c:.2f} of the 404 storm's); {args.passes} passes each")  # fmt: skip
    print(f"view storm: {args.clients} client processes, {served} answers in {seconds:.1f} s "
          f"({served / seconds:.0f}/s); store reads by the view: {view.reads}")  # fmt: skip


def storm(svc, port, args, seconds, ids, at) -> tuple[list[float], int]:
    """Pass times while `args.clients` processes fetch the view (`ids`: jobs to ask for;
    None: a 404 path), and the answers they got."""
    queue: mp.Queue = mp.Queue()
    procs = [
        mp.Process(target=hammer, args=(port, seconds, ids, queue)) for _ in range(args.clients)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # the clients are running
    times = time_passes(svc, args.passes, at)
    for p in procs:
        p.join()
    return times, sum(queue.get() for _ in procs)


if __name__ == "__main__":
    main()
