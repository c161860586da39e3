"""The service's upkeep beside its passes: the store's WAL, the nodes the user view
shows, Slurm's accounting history, and warnings that must not repeat every pass.

A mixin of `Service` (its attributes: config, client, store, `_next_sacct`,
`_warned_at`, `_node_rows`), kept apart so service.py holds the pass itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurm_ext.core.model import Node
from slurm_ext.slurm.client import SlurmError
from slurm_ext.slurm.history import completion_rows
from slurm_ext.store.db import WAL_LIMIT_BYTES

if TYPE_CHECKING:
    from slurm_ext.service.loop import PassResult, Service

log = logging.getLogger("slurm_ext.service.loop")
# `_warn_inversions`: warn when more than this share of at least this many compared
# pairs of adjacent pending jobs stand the other way round in Slurm's priority
ORDER_WARN_SHARE = 0.05
ORDER_CHECK_MIN_PAIRS = 20


class Upkeep:
    def _warn_inversions(self: Service, res: PassResult) -> None:
        """Say (hourly) when Slurm's own priority factors reorder the service's order:
        in site-factor mode the written values' spacing is then below the weights of
        age, fair-share or QOS, and the band must be wider."""
        inverted, compared = res.inversions
        if compared < ORDER_CHECK_MIN_PAIRS or inverted <= ORDER_WARN_SHARE * compared:
            return
        if self._hourly("order"):
            log.warning(
                "Slurm orders %d of %d adjacent pending jobs against the service's order: "
                "its other priority factors outweigh the spacing of the written values; "
                "raise value_max (now %d) or lower slurm.conf's PriorityWeight* "
                "(docs/admin-guide.md, the site factor and fair-share)",
                inverted, compared, self.config.value_max,
            )  # fmt: skip

    def _save_nodes(self: Service, nodes: Sequence[Node]) -> None:
        """Keep the nodes' GPU states for the user view; written only when they change."""
        rows = sorted((n.name, n.state, n.gpus, n.gpus_alloc, n.gpu_type) for n in nodes)
        if rows != self._node_rows:
            self.store.save_nodes(nodes)
            self._node_rows = rows

    def _checkpoint(self: Service) -> None:
        """Truncate the store's WAL; say (hourly) when a reader's open snapshot stops it."""
        if self.store.checkpoint() or self.store.wal_bytes() <= WAL_LIMIT_BYTES:
            return
        if self._hourly("wal"):
            log.warning(
                "store WAL is %.1f MB: a reader holds an old snapshot of %s open; it is "
                "truncated after the first pass once that reader lets go",
                self.store.wal_bytes() / 1e6,
                self.store.path,
            )

    def _hourly(self: Service, warning: str) -> bool:
        """Whether `warning` is due: not logged in the last hour (a condition that lasts
        would otherwise be logged every pass)."""
        t = time.monotonic()
        if t - self._warned_at.get(warning, -math.inf) <= 3600:
            return False
        self._warned_at[warning] = t
        return True

    def _import_history(self: Service, now: float) -> None:
        """Refresh completions from Slurm's accounting (sacct or pyslurm.db, through the
        client) when due; never fails the pass."""
        source = self.config.history_source
        if source == "store" or now < self._next_sacct:
            return
        self._next_sacct = now + self.config.sacct_refresh_s
        try:
            rows = completion_rows(self.client.completed_jobs(now - self.config.sacct_days * 86400))
        except SlurmError as exc:
            if source == "sacct":
                log.error("accounting history unavailable, using the store's history: %s", exc)
            else:
                log.info(
                    "no accounting history (%s); the Gittins distribution uses jobs the service saw",
                    exc.message,
                )
                self._next_sacct = float("inf")  # auto: accounting is off here, stop asking
            return
        added = self.store.add_completions(rows, "sacct")
        log.info(
            "accounting history: %d GPU jobs in the last %.0f days, %d new",
            len(rows),
            self.config.sacct_days,
            added,
        )
