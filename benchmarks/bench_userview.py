"""The user view's cost, and whether a request storm slows the service's pass.

(a) one rebuild of the view (store read + JSON + HTML) for a queue of N jobs;
(b) `Service.run_pass` (replay client, real SQLite store) timed in rounds of three
    conditions, interleaved in rotating order so that other load on the machine (and
    what the previous condition left running) hits each alike, with the
    view's refresher running throughout and passes spaced so that its read after each
    pass is done before the next (as with the service's interval_s >> refresh_s): no
    clients; `--clients` client processes fetching a path the view does not serve (404:
    what the clients and the listener cost on this machine's CPUs); and the same clients
    fetching `/`, `/v1/queue` and `/v1/jobs/ID` in turn as fast as they can. Prints the
    medians, their ratios, the answers served and the store reads the view made (a look
    per refresh_s and a full read per pass at most, however many requests). The clients
    are separate processes, as real users are; on a machine with few cores they compete
    with the pass for CPU whatever they ask.

    .venv/bin/python -m benchmarks.bench_userview [--pending 5000] [--running 1000]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_service import snapshot
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.metrics import ServiceMetrics, serve_http
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient
from slurm_ext.userview.http import UserView

IDLE, NOT_FOUND, VIEW, STOP = 0, 1, 2, 3
CONDITIONS = {IDLE: "alone", NOT_FOUND: "404 storm", VIEW: "view storm"}


def client(port: int, mode, job_ids: list[int], served, limited) -> None:
    """One client process: fetch what `mode` says until it says STOP."""
    view = ["/", "/v1/queue"] + [f"/v1/jobs/{j}" for j in job_ids]
    i = 0
    while (m := mode.value) != STOP:
        if m == IDLE:
            time.sleep(0.005)
            continue
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", view[i % len(view)] if m == VIEW else "/nope")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        if m == VIEW and resp.status in (200, 429):
            count = served if resp.status == 200 else limited
            with count.get_lock():
                count.value += 1
        i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--running", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=20.0, help="the view's answers/s cap")
    args = ap.parse_args()
    jobs, nodes, now = snapshot(args.pending, args.running)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ServiceConfig(store=str(Path(tmp) / "s.db"), port=0, history_source="store")
        store = Store(cfg.store)
        svc = Service(cfg, ReplayClient(jobs, nodes), store)
        svc.run_pass(now=now)  # first pass: every record and decision written
        burst = int(2 * args.rate)  # the clients share one address: its cap is the global one
        view = UserView(
            cfg.store,
            refresh_s=1.0,
            rate=args.rate,
            burst=burst,
            client_rate=args.rate,
            client_burst=burst,
        )
        builds = []
        for _ in range(3):
            t0 = time.perf_counter()
            built = view.build()
            builds.append(time.perf_counter() - t0)
        # as in service (interval_s 30 s >> refresh_s): the refresher's read after a pass
        # is done before the next pass starts
        gap = view.refresh_s + 4 * statistics.median(builds)
        print(f"jobs {len(jobs)}: view rebuild (store read + JSON + HTML) median "
              f"{statistics.median(builds) * 1000:.0f} ms; /v1/queue {len(built.queue) / 1e6:.2f} MB,"
              f" page {len(built.page) / 1e6:.2f} MB")  # fmt: skip
        server = serve_http("127.0.0.1", 0, ServiceMetrics(), None, lambda r: 0, view=view)
        view.reads = 0
        mode, served, limited = mp.Value("i", IDLE), mp.Value("i", 0), mp.Value("i", 0)
        ids = [j.job_id for j in jobs[:: max(1, len(jobs) // 50)]]
        procs = [
            mp.Process(target=client, args=(server.server_port, mode, ids, served, limited))
            for _ in range(args.clients)
        ]
        for p in procs:
            p.start()
        times: dict[int, list[float]] = {c: [] for c in CONDITIONS}
        storm_s, t_start, k = 0.0, time.monotonic(), 0
        order = list(CONDITIONS)
        for r in range(args.rounds):
            for cond in order[r % 3 :] + order[: r % 3]:  # rotated: no condition always
                # follows the same one
                mode.value = cond
                time.sleep(gap)  # the clients are at it; the last pass's rebuild is done
                t0 = time.perf_counter()
                svc.run_pass(now=now + 100 + k)
                times[cond].append(time.perf_counter() - t0)
                if cond == VIEW:
                    storm_s += time.perf_counter() - t0 + gap
                k += 1
        mode.value = STOP
        for p in procs:
            p.join()
        elapsed = time.monotonic() - t_start
        server.shutdown()
        view.close()
        store.close()
    a, c, b = (statistics.median(times[x]) for x in (IDLE, NOT_FOUND, VIEW))
    print(f"pass median ({args.rounds} rounds, interleaved): alone {a * 1000:.0f} ms; "
          f"404 storm {c * 1000:.0f} ms (x{c / a:.2f}); view storm {b * 1000:.0f} ms "
          f"(x{b / a:.2f}; x{b / c:.2f} of the 404 storm)")  # fmt: skip
    print(f"view storm: {args.clients} client processes, {served.value} answers, "
          f"{limited.value} refused (429) in {storm_s:.1f} s of storm; over the whole "
          f"{elapsed:.0f} s run {served.value / elapsed:.0f} answers/s (cap {args.rate:g}/s, "
          f"burst {int(2 * args.rate)}); store reads by the view: {view.reads} "
          f"({k} passes)")  # fmt: skip


if __name__ == "__main__":
    main()
