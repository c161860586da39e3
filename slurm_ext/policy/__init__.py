"""Policy core: pure functions from what a live service sees to ranked decisions.

No I/O here; the service and the simulator call the same functions.
"""

from slurm_ext.policy.config import ORACLES, POLICIES, PolicyConfig
from slurm_ext.policy.gittins import GittinsTable, gittins_index
from slurm_ext.policy.placement import FreeIndex, choose_gpus, fragmentation, place
from slurm_ext.policy.profiles import network_sensitive, spread_slowdown
from slurm_ext.policy.ranking import key_change_after, priority_key, rank
from slurm_ext.policy.tables import build_table

__all__ = [
    "ORACLES",
    "POLICIES",
    "FreeIndex",
    "GittinsTable",
    "PolicyConfig",
    "build_table",
    "choose_gpus",
    "fragmentation",
    "gittins_index",
    "key_change_after",
    "network_sensitive",
    "place",
    "priority_key",
    "rank",
    "spread_slowdown",
]
