"""Python's cyclic garbage collector around a service pass.

A pass over 55,000 jobs allocates a few hundred thousand objects, and the collector,
counting allocations, ran two or three full collections during each one, each
traversing everything the service holds (half of a steady pass, measured with
benchmarks/bench_service.py). A pass makes no reference cycles it needs freed at once,
so the collector waits during the pass; after it, one collection of the young
generations frees whatever cycles the pass made, and once an hour a full one frees
cycles among older objects.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

FULL_EVERY_S = 3600.0


class PassCollector:
    """Holds the collector off during a pass (`during`); one per service."""

    def __init__(self, full_every_s: float = FULL_EVERY_S) -> None:
        self.full_every_s = full_every_s
        self._full_at = time.monotonic()

    @contextmanager
    def during(self) -> Iterator[None]:
        """The collector paused for the block, then a young (or, hourly, a full)
        collection; a collector the process had disabled stays disabled."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()
                if time.monotonic() - self._full_at >= self.full_every_s:
                    self._full_at = time.monotonic()
                    gc.collect()
                else:
                    gc.collect(1)
