"""Which models are network-sensitive (Tiresias' profile rule), in one place.

Models whose tensor sizes are skewed (a few huge fully-connected layers: VGG, AlexNet)
bottleneck on parameter exchange when spread across nodes, so they are consolidated
even if that makes them wait. Others may spread. `spread_slowdown` is the factor the
simulator applies to a job placed on more nodes than it needs.
"""

from __future__ import annotations

# model-name prefix -> slowdown when spread over more nodes than necessary
NETWORK_SENSITIVE: dict[str, float] = {"vgg": 1.6, "alexnet": 1.5}
DEFAULT_SPREAD_SLOWDOWN = 1.05


def network_sensitive(model_tag: str | None) -> bool:
    tag = (model_tag or "").lower()
    return any(tag.startswith(prefix) for prefix in NETWORK_SENSITIVE)


def spread_slowdown(model_tag: str | None) -> float:
    tag = (model_tag or "").lower()
    for prefix, factor in NETWORK_SENSITIVE.items():
        if tag.startswith(prefix):
            return factor
    return DEFAULT_SPREAD_SLOWDOWN
