"""A GPU load for checking the node agent on a real GPU: a bf16 matmul loop that logs
its progress ("<unix time> <iterations>" once a second), so a pause shows as a flat line.

    python3 scripts/gpu_load.py --progress /tmp/load.log [--hold-gib 40] [--seconds 600]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--progress", required=True, help="file to append progress lines to")
    p.add_argument("--size", type=int, default=8192, help="matrix side")
    p.add_argument("--hold-gib", type=float, default=0.0, help="extra GPU memory to hold")
    p.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    args = p.parse_args()
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    held = None
    if args.hold_gib > 0:
        held = torch.ones(int(args.hold_gib * 2**30), dtype=torch.uint8, device="cuda")
    start = last = time.time()
    iterations = 0
    with open(args.progress, "a", encoding="utf-8") as log:
        log.write(f"{start:.3f} 0\n")
        log.flush()
        while time.time() - start < args.seconds:
            a = (a @ a).clamp_(-1, 1)
            iterations += 1
            if iterations % 10 == 0:
                torch.cuda.synchronize()
                now = time.time()
                if now - last >= 1.0:
                    log.write(f"{now:.3f} {iterations}\n")
                    log.flush()
                    last = now
    del held


if __name__ == "__main__":
    main()
