"""Admission engine: Kueue's quota and preemption semantics, the platform's lane rules, readable
reasons with queue positions, and the policy exported as Kueue manifests (`kueue_export.py`; the
ProvisioningRequest and MultiKueue admission checks in `kueue_checks.py`). Pure Python (no Dagster).

`schedule_cycle(state)` runs one cycle; `admit_until_stable(state)` runs cycles back to back (the
gate); `preemption_targets(state, preemptor, flavor)` picks victims; `from_policy(...)` builds the
state from the policy and job requests.

One module per job: `engine.py` runs cycles (the public entry points); `cycle.py` is one cycle
(heads, order, admit or preempt, lane rules); `flavor_assign.py` Kueue's flavor assignment;
`reasons.py` what each waiting workload is told (reason, position, estimated start);
`workload_keys.py` what the engine reads off a workload; `quota.py` the quota snapshot and cohort
tree; `preemption.py` victim search; `nodes.py` and `tas.py` the node and topology rules;
`model.py` the engine's types; `policy_view.py` the state built from the policy; `cases.py` the
YAML admission cases.
May import `policy/`, `requests/`, `cluster/names`, `devices/`, `safeload/`.
"""

from __future__ import annotations

from gpu_platform.admission.engine import admit_until_stable, apply_result, preemption_targets, schedule_cycle
from gpu_platform.admission.model import (
    Admission,
    ClusterQueueSpec,
    ClusterState,
    CycleResult,
    FlavorFungibility,
    FlavorSpec,
    PendingInfo,
    Preemption,
    Rejection,
    ResourceQuota,
    TeamLimit,
    TeamLimits,
    Workload,
)
from gpu_platform.admission.policy_view import AdmittedRequest, PendingRequest, from_policy, workload_for

__all__ = [
    "Admission",
    "AdmittedRequest",
    "ClusterQueueSpec",
    "ClusterState",
    "CycleResult",
    "FlavorFungibility",
    "FlavorSpec",
    "PendingInfo",
    "PendingRequest",
    "Preemption",
    "Rejection",
    "ResourceQuota",
    "TeamLimit",
    "TeamLimits",
    "Workload",
    "admit_until_stable",
    "apply_result",
    "from_policy",
    "preemption_targets",
    "schedule_cycle",
    "workload_for",
]
