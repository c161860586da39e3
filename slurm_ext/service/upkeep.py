"""The service's upkeep beside its passes: the store's WAL, the nodes the user view
shows, Slurm's accounting history, and warnings that must not repeat every pass.

A part the service calls with the store and client it uses (`Upkeep`), holding only
what upkeep remembers between passes, so loop.py holds the pass itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_ext.core.model import Node
from slurm_ext.slurm.client import SlurmClient, SlurmError
from slurm_ext.slurm.history import completion_rows
from slurm_ext.store.db import WAL_LIMIT_BYTES, Store

log = logging.getLogger("slurm_ext.service.loop")
# `warn_inversions`: warn when more than this share of at least this many compared
# pairs of adjacent pending jobs stand the other way round in Slurm's priority
ORDER_WARN_SHARE = 0.05
ORDER_CHECK_MIN_PAIRS = 20


@dataclass
class Upkeep:
    """The service config's upkeep settings and what upkeep remembers between passes."""

    history_source: str  # "auto", "sacct" or "store" (ServiceConfig.history_source)
    sacct_days: float
    sacct_refresh_s: float
    value_max: int  # named in the order warning
    next_sacct: float = 0.0  # when accounting history is next read
    warned_at: dict[str, float] = field(default_factory=dict)  # `hourly`: last logged
    node_rows: list[tuple] | None = None  # what `save_nodes` last wrote

    def warn_inversions(self, inversions: tuple[int, int]) -> None:
        """Say (hourly) when Slurm's own priority factors reorder the service's order
        (`inversions`: (inverted, compared) adjacent pending pairs): in site-factor mode
        the written values' spacing is then below the weights of age, fair-share or QOS,
        and the band must be wider."""
        inverted, compared = inversions
        if compared < ORDER_CHECK_MIN_PAIRS or inverted <= ORDER_WARN_SHARE * compared:
            return
        if self.hourly("order"):
            log.warning(
                "Slurm orders %d of %d adjacent pending jobs against the service's order: "
                "its other priority factors outweigh the spacing of the written values; "
                "raise value_max (now %d) or lower slurm.conf's PriorityWeight* "
                "(docs/admin-guide.md, the site factor and fair-share)",
                inverted, compared, self.value_max,
            )  # fmt: skip

    def save_nodes(self, store: Store, nodes: Sequence[Node]) -> None:
        """Keep the nodes' GPU states for the user view; written only when they change."""
        rows = sorted(
            (n.name, n.state, n.gpus, n.gpus_alloc, n.gpu_type, n.partitions) for n in nodes
        )
        if rows != self.node_rows:
            store.save_nodes(nodes)
            self.node_rows = rows

    def checkpoint(self, store: Store) -> None:
        """Truncate the store's WAL; say (hourly) when a reader's open snapshot stops it."""
        if store.checkpoint() or store.wal_bytes() <= WAL_LIMIT_BYTES:
            return
        if self.hourly("wal"):
            log.warning(
                "store WAL is %.1f MB: a reader holds an old snapshot of %s open; it is "
                "truncated after the first pass once that reader lets go",
                store.wal_bytes() / 1e6,
                store.path,
            )

    def hourly(self, warning: str) -> bool:
        """Whether `warning` is due: not logged in the last hour (a condition that lasts
        would otherwise be logged every pass)."""
        t = time.monotonic()
        if t - self.warned_at.get(warning, -math.inf) <= 3600:
            return False
        self.warned_at[warning] = t
        return True

    def import_history(self, client: SlurmClient, store: Store, now: float) -> None:
        """Refresh completions from Slurm's accounting (sacct or pyslurm.db, through the
        client) when due; never fails the pass."""
        source = self.history_source
        if source == "store" or now < self.next_sacct:
            return
        self.next_sacct = now + self.sacct_refresh_s
        try:
            rows = completion_rows(client.completed_jobs(now - self.sacct_days * 86400))
        except SlurmError as exc:
            if source == "sacct":
                log.error("accounting history unavailable, using the store's history: %s", exc)
            else:
                log.info(
                    "no accounting history (%s); the Gittins distribution uses jobs the service saw",
                    exc.message,
                )
                self.next_sacct = float("inf")  # auto: accounting is off here, stop asking
            return
        added = store.add_completions(rows, "sacct")
        log.info(
            "accounting history: %d GPU jobs in the last %.0f days, %d new",
            len(rows),
            self.sacct_days,
            added,
        )
