"""The GPU pool policy: flavors, cohorts, lanes (Kueue ClusterQueues) and teams, in one file.

`load_policy()` reads `default.yaml` beside this module (or a given file) and returns a frozen,
validated `Policy`. Every problem in the file is reported at once, each with its path
(`lanes.release_eval.quotas[0].borrowing_limit: set but lane has no cohort_name`).
`model.py` defines, `loading.py` reads and checks (it imports the model, never the reverse). May import `devices/`, `safeload/`, `units`.
"""

from __future__ import annotations

from gpu_platform.policy.loading import default_policy_path, load_policy, load_policy_cached, parse_policy
from gpu_platform.policy.model import (
    APPROVAL_KINDS,
    BREAK_GLASS_KINDS,
    GPU,
    ApproverRole,
    BorrowWithinCohort,
    Cohort,
    Flavor,
    Lane,
    LaneTargets,
    NodeShape,
    Policy,
    PolicyError,
    Preemption,
    Provisioning,
    Quota,
    Sharing,
    Site,
    Taint,
    Team,
    TeamCap,
    TeamLimits,
)

__all__ = [
    "APPROVAL_KINDS",
    "BREAK_GLASS_KINDS",
    "GPU",
    "ApproverRole",
    "BorrowWithinCohort",
    "Cohort",
    "Flavor",
    "Lane",
    "LaneTargets",
    "NodeShape",
    "Policy",
    "PolicyError",
    "Preemption",
    "Provisioning",
    "Quota",
    "Sharing",
    "Site",
    "Taint",
    "Team",
    "TeamCap",
    "TeamLimits",
    "default_policy_path",
    "load_policy",
    "load_policy_cached",
    "parse_policy",
]
