"""What the user view may show: its mode from `user_view` and Slurm's PrivateData, and
the anonymised rows.

The view's listener cannot tell who asks (plain HTTP, no login), so it shows everyone
the same thing. `user_view = "auto"` (the default) follows Slurm: where slurm.conf's
PrivateData hides jobs, users or accounts from other users, the view is anonymous;
otherwise it is full, as squeue shows by default. "full" and "anonymous" are the
admin's explicit choice; "off" serves no view.

Anonymous means: no user name, and no history-group label that carries a user, a job
name or an account (the Gittins index's group: "user=alice,name=train"), in the group
column or inside the service's reason; such a label reads HIDDEN_GROUP instead. Labels
that name no one (pooled, a GPU-count class) are kept. Job ids, GPU counts, states,
times, ranks and Slurm's pending reasons stay: they are what "why is my job waiting?"
needs, and they name no one.
"""

from __future__ import annotations

import re

MODES = ("auto", "full", "anonymous", "off")
# PrivateData values under which a user may not see other users' jobs, names or accounts
HIDING = frozenset({"jobs", "users", "accounts"})
HIDDEN_GROUP = "similar jobs (hidden)"
# the group labels that name no one: pooled, a GPU class, a GPU count (policy/kinds.py
# group_label, policy/ranking.py job_table), optionally truncated at a time limit
_NEUTRAL_GROUP = re.compile(
    r"(pooled|\d+(-\d+)? GPUs? class|gpus=\d+(-\d+)? GPUs?)"
    r"(, truncated at its time limit \(\d+ GPU-s\))?"
)


def view_mode(setting: str, private_data: frozenset[str] | None) -> str:
    """The mode the view runs in: `setting` unless it is "auto", which is "anonymous"
    when PrivateData hides jobs, users or accounts, or when Slurm could not say
    (`private_data` None: hide rather than guess), else "full"."""
    if setting != "auto":
        return setting
    if private_data is None or private_data & HIDING:
        return "anonymous"
    return "full"


def neutral_group(group: str | None) -> str | None:
    """`group` if it names no one, else HIDDEN_GROUP (None and "" stay as they are)."""
    if not group or _NEUTRAL_GROUP.fullmatch(group):
        return group
    return HIDDEN_GROUP


def anonymous(row: dict) -> dict:
    """A queue row or an explanation without its user and without any group label that
    names a user, a job or an account (also where the service's reason quotes it)."""
    group = row.get("group")
    hidden = neutral_group(group)
    reason = row.get("policy_reason") or ""
    if group and hidden != group:
        reason = reason.replace(group, hidden or "")
    return row | {"user": "", "group": hidden, "policy_reason": reason}
