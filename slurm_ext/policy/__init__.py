"""Policy core: pure functions from what a live service sees to ranked decisions.

No I/O here; the service and the simulator call the same functions. Modules outside
this package import from here, not from its modules (tests of one module's internals
excepted); this file imports only this package's modules.
"""

from slurm_ext.policy.colocation import Prediction, classify
from slurm_ext.policy.compose import composed_score, live_key, site_factor
from slurm_ext.policy.config import ORACLES, POLICIES, PolicyConfig
from slurm_ext.policy.fairshare import UsageLedger, multifactor_priority
from slurm_ext.policy.gittins import GittinsTable, gittins_index, gpu_class
from slurm_ext.policy.guards import GUARDED, starts_promoted, wait_guarded
from slurm_ext.policy.kinds import Choice
from slurm_ext.policy.opportunistic import AFTER_REQUEUE, ends_before, overdue, shard_offered
from slurm_ext.policy.placement import (
    MODES,
    FreeIndex,
    asks_fewest_nodes,
    choose_gpus,
    consolidate_for,
    cpu_limited,
    fragmentation,
    min_nodes,
    place,
)
from slurm_ext.policy.preemption import (
    RunningJob,
    WaitingJob,
    choose_victims,
    fits_now,
    requeue_cost_gpu_s,
    why_no_victims,
)
from slurm_ext.policy.profiles import network_sensitive, spread_slowdown
from slurm_ext.policy.queues import starvation_lifts
from slurm_ext.policy.ranking import (
    Key,
    decide,
    key_and_change,
    key_change_after,
    priority_key,
    rank,
)
from slurm_ext.policy.reasons import could_start, no_preemption_note, reason_words, steady_reason
from slurm_ext.policy.tables import build_table

__all__ = [
    "steady_reason",
    "reason_words",
    "no_preemption_note",
    "could_start",
    "why_no_victims",
    "fits_now",
    "AFTER_REQUEUE",
    "GUARDED",
    "MODES",
    "ORACLES",
    "POLICIES",
    "Choice",
    "FreeIndex",
    "GittinsTable",
    "Key",
    "PolicyConfig",
    "Prediction",
    "RunningJob",
    "UsageLedger",
    "WaitingJob",
    "asks_fewest_nodes",
    "build_table",
    "choose_gpus",
    "choose_victims",
    "classify",
    "composed_score",
    "consolidate_for",
    "cpu_limited",
    "decide",
    "ends_before",
    "fragmentation",
    "gittins_index",
    "gpu_class",
    "key_and_change",
    "key_change_after",
    "live_key",
    "min_nodes",
    "multifactor_priority",
    "network_sensitive",
    "overdue",
    "place",
    "priority_key",
    "rank",
    "requeue_cost_gpu_s",
    "shard_offered",
    "site_factor",
    "spread_slowdown",
    "starts_promoted",
    "starvation_lifts",
    "wait_guarded",
]
