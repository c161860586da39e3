"""CPU time and memory of a running `slurm-ext-agent run`, read from /proc (real node check).

    python3 scripts/agent_footprint.py --seconds 30 --config agent.toml

Starts the agent as a child, waits, reads /proc/PID/stat and /proc/PID/status, stops it.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

from nodeagent.cgroups import read_proc_stat


def sample(pid: int) -> dict[str, float]:
    st = read_proc_stat(pid)
    if st is None:
        raise SystemExit(f"agent (pid {pid}) is gone")
    out = {"cpu_s": st.cpu_s}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key + "_mb"] = int(value.split()[0]) / 1024
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--config", required=True)
    args = p.parse_args()
    cmd = [sys.executable, "-m", "nodeagent.cli", "run", "--config", args.config]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    time.sleep(5)  # start-up (imports, NVML init) is not the steady state
    first, t0 = sample(proc.pid), time.monotonic()
    time.sleep(args.seconds)
    last, elapsed = sample(proc.pid), time.monotonic() - t0
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    share = (last["cpu_s"] - first["cpu_s"]) / elapsed * 100
    mem = " ".join(f"{k}={v:.1f}" for k, v in last.items() if k.endswith("_mb"))
    print(f"{args.config}: cpu {share:.2f} % of one core over {elapsed:.0f} s; {mem}")


if __name__ == "__main__":
    main()
