"""The agent's TOML configuration (etc/agent.toml), validated by slurm_ext.core.config.

The co-location classes (which jobs are opportunistic) are not here: the agents and the
service read them from one file (`classes_file`, slurm_ext.core.classes). The
co-location rule's constants are in `[colocation.tuning]` (docs/nodeagent.md, "Tuning
constants"), not in the shipped file."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_ext.core.config import choices, positive
from slurm_ext.core.fields import tuning
from slurm_ext.core.reports import MAX_GPUS_PER_NODE


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def _fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within 0..1, got {value}")


@dataclass
class GpuConfig:
    backend: str = choices("nvml", "simulated", "none", default="nvml")
    simulated_count: int = 8  # only for backend = "simulated"
    # only for backend = "simulated": JSON list of {"pid", "gpu", "memory_bytes", "sm_util"}
    # placing real processes on the simulated GPUs (end-to-end tests)
    simulated_processes_file: str = ""
    util_window_s: float = positive(10.0)  # first per-process utilisation query looks this far back
    # read the NVML total-energy counter at most this often (it costs ~4 ms CPU per read on
    # an H100); power is integrated in between and the counter corrects it at the next read
    energy_interval_s: float = positive(30.0)

    def __post_init__(self) -> None:
        # the simulated backend builds every GPU at every read: a huge count hangs the agent
        if not 1 <= self.simulated_count <= MAX_GPUS_PER_NODE:
            raise ValueError(
                f"simulated_count must be within 1..{MAX_GPUS_PER_NODE} GPUs per node "
                f"(the most a node report may carry), got {self.simulated_count}"
            )


@dataclass
class EnergyConfig:
    rapl_root: str = "/sys/class/powercap"


@dataclass
class ExporterConfig:
    enabled: bool = True
    listen: str = "0.0.0.0"
    port: int = 9817
    # also serve the nvidia_gpu_* names of jobstats dashboards, on /jobstats (nvidia_gpu_jobId
    # is camelCase, which promtool rejects: /metrics stays promtool-clean)
    jobstats_compat: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")


@dataclass
class ReportConfig:
    enabled: bool = False
    service_url: str = ""  # e.g. http://slurm-head:8642 ; reports go to <url>/v1/reports
    secret_file: str = "/etc/slurm-ext/report.secret"
    interval_s: float = 60.0
    timeout_s: float = 10.0
    spool_dir: str = "/var/spool/slurm-ext-agent"
    spool_max_batches: int = positive(1000)
    backoff_max_s: float = positive(300.0)

    def __post_init__(self) -> None:
        _positive("interval_s", self.interval_s)
        _positive("timeout_s", self.timeout_s)
        if self.enabled and not self.service_url.startswith(("http://", "https://")):
            raise ValueError("service_url must be an http(s) URL when reports are enabled")


@dataclass
class EacoConfig:
    enabled: bool = False
    gpu_idle_w: float = 70.0
    gpu_max_w: float = 700.0
    opportunistic_power_w: float = 250.0
    predicted_slowdown: float = 0.05
    max_slowdown: float = 0.10


@dataclass
class ColocationConfig:
    """`[colocation]`: what an admin sets (on or off, the slowdown that pauses an
    opportunistic job, progress files, EaCO) and, in `[colocation.tuning]`, the rule's
    constants (policy/colocation.py `Policy`)."""

    enabled: bool = True
    slow_fraction: float = 0.7
    # GPU memory share at which opportunistic jobs are paused
    memory_high: float = tuning(0.95)
    # a guaranteed job below this utilisation is idle (the opportunistic jobs may resume)
    idle_util: float = tuning(0.05)
    # a guaranteed job's solo utilisation below this is not judged (too idle to tell)
    min_solo_util: float = tuning(0.10)
    # read a guaranteed job's SLURM_EXT_PROGRESS_FILE: progress below slow_fraction x its
    # solo rate is a slowdown too, judged after min_solo_rate_samples solo samples
    progress: bool = True
    # a progress-file read still running after this long is abandoned (a hung NFS or FUSE
    # mount must not stall the loop); that job's progress is unknown until it returns
    progress_timeout_s: float = tuning(0.5)
    min_solo_rate_samples: int = tuning(3)
    eaco: EacoConfig = field(default_factory=EacoConfig)

    def __post_init__(self) -> None:
        for name in ("slow_fraction", "memory_high", "idle_util", "min_solo_util"):
            _fraction(name, getattr(self, name))
        if not 0 < self.progress_timeout_s <= 60:  # also refuses NaN
            raise ValueError(
                f"progress_timeout_s must be within (0, 60], got {self.progress_timeout_s}"
            )
        if self.min_solo_rate_samples < 1:
            raise ValueError(
                f"min_solo_rate_samples must be >= 1, got {self.min_solo_rate_samples}"
            )


@dataclass
class JobsConfig:
    """Where a job's QOS and partition, hence its co-location class, come from.

    "slurm": slurmctld (`squeue --json`), which the job's user cannot change. "environ":
    SLURM_JOB_QOS / SLURM_JOB_PARTITION of the job's first process, for nodes that cannot
    reach slurmctld; spoofable (a batch script can re-exec itself with other values)."""

    source: str = choices("slurm", "environ", default="slurm")
    slurm_conf: str | None = None  # SLURM_CONF for squeue; None: Slurm's own default
    timeout_s: float = 10.0  # one squeue call
    cache_s: float = 60.0  # an answer per job id is reused this long; also the retry delay

    def __post_init__(self) -> None:
        _positive("timeout_s", self.timeout_s)
        _positive("cache_s", self.cache_s)


@dataclass
class AgentConfig:
    node_name: str = ""  # default: the short host name
    interval_s: float = 5.0
    state_file: str = "/var/lib/slurm-ext-agent/state.json"  # "" keeps no state
    # the co-location classes file, read by the service too (slurm_ext.core.classes);
    # "": /etc/slurm-ext/classes.toml where it exists, else its defaults
    classes_file: str = ""
    proc_root: str = "/proc"
    log_level: str = choices("DEBUG", "INFO", "WARNING", "ERROR", default="INFO")
    gpu: GpuConfig = field(default_factory=GpuConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    colocation: ColocationConfig = field(default_factory=ColocationConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)

    def __post_init__(self) -> None:
        _positive("interval_s", self.interval_s)
