"""Whether node agents can reach the service's report listener, judged from its config.

The example service.toml listens on 127.0.0.1 while agents post to the head node: with a
report secret set, that is almost always a forgotten `listen`, and agents would spool
their reports until the spool is full. `serve` logs these warnings at start.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_ext.service.loop import ServiceConfig

log = logging.getLogger("slurm_ext.service.loop")

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def is_loopback(listen: str) -> bool:
    """True for an address (or a localhost name) that other hosts cannot connect to."""
    host = listen.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # another host name: it may well resolve to a reachable address


def report_listener_warnings(listen: str, port: int, report_secret_file: str | None) -> list[str]:
    """What keeps reports from other hosts out, when a secret says they are expected."""
    if not report_secret_file:
        return []
    if not port:
        return [
            "report_secret_file is set but port = 0: there is no listener, and node agents "
            "keep their reports spooled; set port (docs/admin-guide.md, node reports)"
        ]
    if is_loopback(listen):
        return [
            f"report_secret_file is set but the listener is on {listen} only: node agents on "
            "other hosts cannot deliver reports and keep them spooled; set listen to an "
            'address they reach (e.g. listen = "0.0.0.0") (docs/admin-guide.md, node reports)'
        ]
    return []


def warn_if_reports_unreachable(cfg: ServiceConfig) -> list[str]:
    """Log report_listener_warnings for the service's config; returns them."""
    warnings = report_listener_warnings(cfg.listen, cfg.port, cfg.report_secret_file)
    for warning in warnings:
        log.warning("%s", warning)
    return warnings
