"""The wait guard's budget on the simulator's waiting jobs (`policy.guard_budget`): the
jobs the guard is due for, the ids it lifts, and whether the due set changed since they
were chosen. The keys (`sim.keys`) ask it whether a job is held back; the lifts are
recomputed once per change of the due set, not per event."""

from __future__ import annotations

from slurm_ext.policy import PolicyConfig
from slurm_ext.policy.gittins import GittinsTable
from slurm_ext.policy.guard_budget import Due, budget_lifts, budgeted, owner
from slurm_ext.policy.guards import guard_deadline
from slurm_ext.sim.simjob import SimJob


class GuardBudget:
    """The due jobs (`due`), the ids lifted (`lifts`) and whether they are stale (`dirty`)."""

    def __init__(self, cfg: PolicyConfig, total_gpus: int) -> None:
        self.cfg, self.total_gpus = cfg, total_gpus
        self.due: dict[SimJob, Due] = {}
        self.lifts: set[int] = set()
        self.dirty = False

    @staticmethod
    def of(cfg: PolicyConfig, total_gpus: int) -> GuardBudget | None:
        """The budget when the policy's wait guard has one, else None."""
        return GuardBudget(cfg, total_gpus) if budgeted(cfg) else None

    def held(self, job: SimJob, table: GittinsTable | None, now: float, attained: float) -> bool:
        """Whether the budget holds this waiting job back: files it among the jobs the
        guard is due for, or takes it out; a change there marks the lifts stale."""
        deadline = guard_deadline(
            self.cfg, table, job.gpus, attained, job.waiting_since,
            job.user, job.name, job.account, job.limit,
        )  # fmt: skip
        due = self.due
        if deadline <= now:
            entry = (deadline, job.id, job.gpus, owner(self.cfg, job.user))
            if due.get(job) != entry:
                due[job] = entry
                self.dirty = True
            return job.id not in self.lifts
        if due.pop(job, None) is not None:
            self.dirty = True
        return False

    def relift(self) -> list[int]:
        """Recompute the lifts (`budget_lifts`); the ids whose lift changed, in order."""
        self.dirty = False
        lifts = budget_lifts(self.due.values(), self.total_gpus, self.cfg.wait_guard_budget)
        changed = sorted(lifts ^ self.lifts)
        self.lifts = lifts
        return changed

    def started(self, job: SimJob) -> None:
        """`job` starts: the guard is no longer due for it."""
        if self.due.pop(job, None) is not None:
            self.dirty = True
