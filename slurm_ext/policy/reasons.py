"""What a pending job's Slurm reason says of it: could it start if GPUs were free?

The preemption rule requeues running jobs only for a waiting job that could start in the
GPUs they free. Slurm's reason says so (its list: src/common/job_state_reason.c): a job
that waits for resources or for its priority turn could; one that waits on a
dependency, a hold, its begin time, a QOS or association limit, a reservation, a node
or partition that is not available could not, and requeueing for it only frees GPUs
that backfill hands to someone else (live: the same a100 job requeued again and again
for a job held by `Dependency`). Pure: the service, the user view and the simulator
(which sets reasons on its own jobs where it models them) all call `could_start`.
"""

from __future__ import annotations

# the reasons of a job Slurm would start once enough GPUs are free: it waits for
# resources (`Resources`), for jobs ahead of it (`Priority`), for nothing yet (`None`,
# or no reason: a job just submitted, a simulated job), or for the next scheduler pass
# (`SchedDefer`)
STARTABLE = frozenset({"", "None", "Resources", "Priority", "SchedDefer"})

# (prefix, words): why a job that cannot start waits, first match wins
_WORDS: tuple[tuple[str, str], ...] = (
    ("DependencyNeverSatisfied", "waits on a dependency that can never be satisfied"),
    ("Dependency", "waits on a dependency"),
    ("JobHeld", "is held"),
    ("JobHoldMaxRequeue", "is held after too many requeues"),
    ("BeginTime", "waits for its begin time"),
    ("QOS", "is over a QOS limit"),
    ("Assoc", "is over an association limit"),
    ("AccountingPolicy", "is over an accounting limit"),
    ("Max", "is over a per-user or per-account limit"),
    ("ReqNodeNotAvail", "asks for nodes that are not available"),
    ("NodeDown", "asks for nodes that are down"),
    ("PartitionDown", "waits for its partition, which is down"),
    ("PartitionInactive", "waits for its partition, which is inactive"),
    ("PartitionNodeLimit", "asks for more nodes than its partition allows"),
    ("PartitionTimeLimit", "asks for more time than its partition allows"),
    ("Partition", "is refused by its partition's configuration"),
    ("Reservation", "waits for a reservation"),
    ("Licenses", "waits for licenses"),
    ("BurstBuffer", "waits for a burst buffer"),
    ("Cleaning", "waits for its last run to be cleaned up"),
    ("InvalidAccount", "has an account Slurm does not accept"),
    ("InvalidQOS", "has a QOS Slurm does not accept"),
    ("BadConstraints", "asks for constraints no node satisfies"),
    ("Constraints", "asks for constraints no node satisfies now"),
)


def could_start(reason: str | None) -> bool:
    """Would Slurm start this pending job if enough GPUs were free where it may run?"""
    return (reason or "") in STARTABLE


def steady_reason(reason: str, last_blocking: str | None) -> str:
    """The reason to act on: Slurm sets a pending job's reason to `None` when its priority
    is updated (22.05, seen live: `Dependency`, then `None` after the service's write,
    then `Dependency` again at the next scheduling cycle), so a job the last pass saw
    blocked (`last_blocking`) stays so until Slurm names another reason."""
    if last_blocking and (reason or "None") == "None":
        return last_blocking
    return reason


def reason_words(reason: str | None) -> str:
    """Why a job waits, in words ("waits on a dependency"); the words for a startable
    reason say that it waits for GPUs or its turn."""
    reason = reason or ""
    if reason == "Resources":
        return "waits for free GPUs (or other resources)"
    if reason == "Priority":
        return "waits for jobs ahead of it"
    if could_start(reason):
        return "waits to be scheduled"
    for prefix, words in _WORDS:
        if reason.startswith(prefix):
            return words
    return f"waits (Slurm reason {reason})"


def no_preemption_note(reason: str | None) -> str:
    """What the service says of a waiting job it never requeues a running job for;
    "" for a job it may preempt for."""
    if could_start(reason):
        return ""
    return f"{reason_words(reason)}: no job is requeued for it"
