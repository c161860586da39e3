"""`service.toml` as dataclasses: what the service reads at start, checked there.

The keys an admin sets are in etc/service.toml with their meaning; the rest are in
docs/admin-guide.md ("Other settings") and, for `[policy.tuning]`, docs/simulator.md
("Tuning constants"). `slurm_ext.core.config.load_config` turns a bad value into an
error naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.core.config import choices, positive
from slurm_ext.policy import PolicyConfig
from slurm_ext.predict.from_store import PredictorServiceConfig
from slurm_ext.service.opportunistic_requeue import OpportunisticSection
from slurm_ext.service.site_factors import check_composition


@dataclass
class SlurmSection:
    """How to reach Slurm. backend: auto (pyslurm if it matches the running Slurm, else
    the CLI), pyslurm, or cli. slurm_conf: path to slurm.conf (default: Slurm's own).
    timeout_s: bound on every Slurm call."""

    backend: str = choices("auto", "pyslurm", "cli", default="auto")
    slurm_conf: str | None = None
    timeout_s: float = positive(30.0)


@dataclass
class ServiceConfig:
    """`service.toml` (see the module docstring for where each key is described)."""

    interval_s: float = positive(30.0)
    store: str = "/var/lib/slurm-ext/service.db"
    # the co-location classes file, read by the node agents too (slurm_ext.core.classes);
    # "": /etc/slurm-ext/classes.toml where it exists, else its defaults
    classes_file: str = ""
    mode: str = choices("site_factor", "priority", default="site_factor")
    partitions: list[str] = field(default_factory=list)  # empty: every partition
    value_min: int = 1
    value_max: int = 1_000_000
    placement: bool = False
    placement_mode: str = choices("consolidate", "spread", "profile", default="profile")
    preemption: str = choices("off", "requeue", default="off")
    max_requeues_per_pass: int = 2
    listen: str = "127.0.0.1"
    port: int = 9788  # metrics, agent reports and the user view; 0 disables the listener
    # the read-only user view on the listener (slurm_ext/userview/privacy.py): "auto"
    # follows Slurm's PrivateData (anonymous where it hides jobs, users or accounts),
    # "full" every job with its user, "anonymous" no user, job name or account, "off" none
    user_view: str = choices("auto", "full", "anonymous", "off", default="auto")
    report_secret_file: str | None = None
    backoff_max_s: float = positive(300.0)
    # Completed-job history for the Gittins distribution, beyond what the service saw:
    # "auto" imports sacct's when accounting answers (else uses the store alone, logged
    # once), "sacct" insists (errors logged every refresh), "store" never asks sacct.
    history_source: str = choices("auto", "sacct", "store", default="auto")
    sacct_days: float = positive(30.0)
    sacct_refresh_s: float = positive(3600.0)
    slurm: SlurmSection = field(default_factory=SlurmSection)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    predictor: PredictorServiceConfig = field(default_factory=PredictorServiceConfig)
    opportunistic: OpportunisticSection = field(default_factory=OpportunisticSection)

    @property
    def composes(self) -> bool:
        """The service writes the composed SiteFactor (`slurm_ext.service.site_factors`): W x
        the index share, not rank-spaced values in [value_min, value_max]."""
        p = self.policy
        return self.mode == "site_factor" and p.policy == "gittins" and p.fairshare_site_weight > 0

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        if not 1 <= self.value_min < self.value_max <= 4_000_000_000:
            raise ValueError("need 1 <= value_min < value_max <= 4000000000")
        if self.mode == "site_factor" and self.value_max > 2_000_000_000:
            raise ValueError("value_max must be <= 2000000000 in site_factor mode")
        check_composition(self.mode, self.policy)
        if self.policy.oracle:
            raise ValueError(
                f"policy.policy = {self.policy.policy!r} is a simulator-only oracle "
                "(it reads true job durations); use gittins, las, fifo or multifactor"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be 0..65535")
        if self.listen not in ("127.0.0.1", "::1", "localhost") and not self.report_secret_file:
            raise ValueError("listening beyond loopback needs report_secret_file")
