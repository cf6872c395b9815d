"""Case files (tests/fixtures/admission/*.yaml): load, run, and check expectations.

Format and contract: tests/fixtures/admission/README.md (the shared admission-cases README).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.admission.engine import (
    admit_until_stable,
    preemption_targets,
    schedule_cycle,
    schedule_until_stable,
)
from gpu_platform.admission.model import (
    INADMISSIBLE,
    TAS_FOLLOWS_FLAVOR,
    TAS_PREFERRED,
    TAS_REQUIRED,
    TAS_UNCONSTRAINED,
    AdmissionFairSharing,
    ClusterQueueSpec,
    ClusterState,
    CohortSpec,
    FlavorFungibility,
    FlavorSpec,
    NodeSpec,
    ResourceQuota,
    TeamLimit,
    TeamLimits,
    Workload,
)


def _flavor(raw: Any) -> FlavorSpec:
    """A name, or `{name, spot, capacity, topology_levels: [node labels]}` (levels: the flavor is
    topology-aware, its ResourceFlavor naming a Topology with these levels)."""
    if isinstance(raw, str):
        return FlavorSpec(raw)
    levels = tuple(str(v) for v in raw.get("topology_levels") or ())
    return FlavorSpec(str(raw["name"]), bool(raw.get("spot", False)), raw.get("capacity"), levels)


def _topology(raw: Any) -> tuple[str | None, str | None]:
    """A workload's `topology`: absent (no annotation), `{required: LEVEL}`, `{preferred: LEVEL}`,
    `{unconstrained: true}` (Kueue's podset annotations) or `follows-flavor` (the platform's Jobs)."""
    if raw is None:
        return None, None
    if raw == TAS_FOLLOWS_FLAVOR:
        return TAS_FOLLOWS_FLAVOR, None
    if isinstance(raw, Mapping) and len(raw) == 1:
        ((mode, value),) = raw.items()
        if mode in (TAS_REQUIRED, TAS_PREFERRED) and value:
            return str(mode), str(value)
        if mode == TAS_UNCONSTRAINED and value is True:
            return TAS_UNCONSTRAINED, None
    raise ValueError(
        f"topology: {raw!r} is not one of {{required: LEVEL}}, {{preferred: LEVEL}}, {{unconstrained: true}}, "
        f"{TAS_FOLLOWS_FLAVOR}"
    )


def _quotas(rows: Any) -> tuple[ResourceQuota, ...]:
    return tuple(
        ResourceQuota(
            str(q["flavor"]),
            str(q["resource"]),
            float(q.get("nominal", 0)),
            None if q.get("borrowingLimit") is None else float(q["borrowingLimit"]),
            None if q.get("lendingLimit") is None else float(q["lendingLimit"]),
        )
        for q in rows or []
    )


def _fungibility(raw: Mapping[str, Any] | None) -> FlavorFungibility | None:
    if not raw:
        return None
    return FlavorFungibility(
        raw.get("whenCanBorrow", "MayStopSearch"),
        raw.get("whenCanPreempt", "TryNextFlavor"),
        raw.get("preference"),
    )


def _weight(raw: Mapping[str, Any]) -> float:
    if raw.get("fair_weight") is not None:
        return float(raw["fair_weight"])
    return float((raw.get("fairSharing") or {}).get("weight", raw.get("weight", 1.0)))


def _cohort(raw: Any) -> CohortSpec:
    if isinstance(raw, str):
        return CohortSpec(raw)
    return CohortSpec(
        name=str(raw["name"]),
        parent=None if raw.get("parent") is None else str(raw["parent"]),
        quotas=_quotas(raw.get("quotas")),
        fair_weight=_weight(raw),
    )


def _team_limit(raw: Any) -> TeamLimit | None:
    if raw is None:
        return None
    return TeamLimit(
        None if raw.get("max_gpus") is None else float(raw["max_gpus"]),
        None if raw.get("max_share") is None else float(raw["max_share"]),
        None if raw.get("max_running") is None else int(raw["max_running"]),
    )


def _team_limits(raw: Any) -> TeamLimits | None:
    """`team_limits: {default: {max_gpus | max_share, max_running}, teams: {team: {...}}}`."""
    if raw is None:
        return None
    teams = {str(k): _team_limit(v) for k, v in (raw.get("teams") or {}).items()}
    return TeamLimits(_team_limit(raw.get("default")), {k: v for k, v in teams.items() if v is not None})


def _afs(raw: Any) -> AdmissionFairSharing | None:
    """`admission_fair_sharing: {consumed: {team: {resource: amount}}, weights: {team: w},
    resource_weights: {resource: w}, entry_penalty_rate}` (a workload's `team` is its LocalQueue)."""
    if raw is None:
        return None
    if raw is True:
        return AdmissionFairSharing()
    return AdmissionFairSharing(
        consumed={str(t): {str(r): float(v) for r, v in (u or {}).items()} for t, u in (raw.get("consumed") or {}).items()},
        weights={str(t): float(w) for t, w in (raw.get("weights") or {}).items()},
        resource_weights={str(r): float(w) for r, w in (raw.get("resource_weights") or {}).items()},
        entry_penalty_rate=float(raw.get("entry_penalty_rate", 0.0)),
    )


def _cq(raw: Mapping[str, Any]) -> ClusterQueueSpec:
    pre = raw.get("preemption") or {}
    bwc = pre.get("borrowWithinCohort") or {}
    quotas = _quotas(raw.get("quotas"))
    yt = raw.get("yields_to")
    return ClusterQueueSpec(
        name=str(raw["name"]),
        quotas=quotas,
        cohort=raw.get("cohort"),
        queueing_strategy=raw.get("queueingStrategy", "BestEffortFIFO"),
        within_cluster_queue=pre.get("withinClusterQueue", "Never"),
        reclaim_within_cohort=pre.get("reclaimWithinCohort", "Never"),
        borrow_within_cohort=bwc.get("policy", "Never"),
        max_priority_threshold=bwc.get("maxPriorityThreshold"),
        yields_to=None if yt is None else tuple(yt),
        protected=bool(raw.get("protected", False)),
        fair_sharing_weight=_weight(raw),
        budget_remaining=raw.get("budget_remaining"),
        budget_total=raw.get("budget_total"),
        flavor_fungibility=_fungibility(raw.get("flavor_fungibility")),
        team_limits=_team_limits(raw.get("team_limits")),
        admission_fair_sharing=_afs(raw.get("admission_fair_sharing")),
    )


def _boost(raw: Mapping[str, Any]) -> int:
    """A workload's `priority_boost`: Kueue's `kueue.x-k8s.io/priority-boost` annotation (KEP-7990),
    added to its priority wherever Kueue compares priorities (docs/admission.md, Aging); absent: 0."""
    value = raw.get("priority_boost")
    if value is None:
        return 0
    from gpu_platform.policy.aging import parse_boost

    return parse_boost(value, f"workload {raw.get('name')!r}: priority_boost")


def _wl(raw: Mapping[str, Any]) -> Workload:
    allowed = raw.get("allowed_flavors")
    topology, level = _topology(raw.get("topology"))
    flavor = raw.get("flavor")
    resource_flavors = None
    if isinstance(flavor, Mapping):
        resource_flavors = {str(k): str(v) for k, v in flavor.items()}
        flavor = min(resource_flavors.values()) if resource_flavors else None
    return Workload(
        name=str(raw["name"]),
        cq=str(raw["cq"]),
        requests={str(k): float(v) for k, v in (raw.get("requests") or {}).items()},
        priority=int(raw.get("priority", 0)) + _boost(raw),
        created_at=float(raw.get("created_at", 0)),
        admitted_at=float(raw.get("admitted_at", 0)),
        flavor=flavor,
        resource_flavors=resource_flavors,
        allowed_flavors=None if allowed is None else tuple(allowed),
        evidence=bool(raw.get("evidence", False)),
        checkpointed=bool(raw.get("checkpointed", False)),
        safety_approval=bool(raw.get("safety_approval", False)),
        cost_approval=bool(raw.get("cost_approval", False)),
        team=None if raw.get("team") is None else str(raw["team"]),
        max_cost=None if raw.get("max_cost") is None else float(raw["max_cost"]),
        expected_duration_s=None
        if raw.get("expected_duration_s") is None
        else float(raw["expected_duration_s"]),
        pods=int(raw.get("pods", 1)),
        placement=None
        if raw.get("placement") is None
        else {str(k): float(v) for k, v in raw["placement"].items()},
        evicted=bool(raw.get("evicted", False)),
        uid=None if raw.get("uid") is None else str(raw["uid"]),
        evicted_finish=None if raw.get("evicted_finish") is None else bool(raw["evicted_finish"]),
        topology=topology,
        topology_level=level,
    )


def _nodes(rows: Any) -> tuple[NodeSpec, ...]:
    """`nodes: [{name, flavor, gpus}]`, or `{flavor, gpus, count}` for `count` nodes named
    `<flavor>-<i>` (i from 0)."""
    out: list[NodeSpec] = []
    for raw in rows or []:
        if "count" in raw:
            out += [
                NodeSpec(f"{raw['flavor']}-{i}", str(raw["flavor"]), float(raw["gpus"]))
                for i in range(int(raw["count"]))
            ]
        else:
            out.append(NodeSpec(str(raw["name"]), str(raw["flavor"]), float(raw["gpus"])))
    return tuple(out)


def state_from_case(case: Mapping[str, Any]) -> ClusterState:
    """The engine state a case describes (cohorts may be names or trees with quotas)."""
    cohorts = tuple(_cohort(c) for c in case.get("cohorts") or [])
    _check_tree(cohorts)
    fs = case.get("fair_sharing")
    fair = bool(fs.get("enabled", True)) if isinstance(fs, dict) else bool(fs)
    admitted = tuple(_wl(w) for w in case.get("admitted") or [])
    pending = tuple(_wl(w) for w in case.get("pending") or [])
    if "now" in case:
        now = float(case["now"])
    elif case.get("kind") == "schedule_until_stable":
        # Kueue's clock runs after everything the case recorded, so workloads admitted during the
        # run count as admitted more recently than the initial ones.
        now = 1.0 + max([w.admitted_at for w in admitted] + [w.created_at for w in admitted + pending] + [0.0])
    else:
        now = 0.0
    return ClusterState(
        cluster_queues=tuple(_cq(c) for c in case.get("cluster_queues") or []),
        flavors=tuple(_flavor(f) for f in case.get("flavors") or []),
        admitted=admitted,
        pending=pending,
        cohorts=cohorts,
        fair_sharing=fair,
        flavor_fungibility=_fungibility(case.get("flavor_fungibility")) or FlavorFungibility(),
        now=now,
        nodes=_nodes(case.get("nodes")),
    )


def _check_tree(cohorts: tuple[CohortSpec, ...]) -> None:
    parents = {c.name: c.parent for c in cohorts}
    for name in parents:
        seen = {name}
        p = parents.get(name)
        while p is not None:
            if p in seen:
                raise ValueError(f"cohort {name!r}: its parent chain has a cycle through {p!r}")
            seen.add(p)
            p = parents.get(p)


@dataclass
class CaseOutcome:
    id: str
    output: dict[str, Any]
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def run_case(case: Mapping[str, Any]) -> CaseOutcome:
    state = state_from_case(case)
    kind = case.get("kind", "schedule_cycle")
    cid = str(case.get("id"))
    if kind == "preemption_targets":
        preempted = []
        for p in state.pending:
            flavor = p.flavor or next(
                iter(q.flavor for c in state.cluster_queues if c.name == p.cq for q in c.quotas)
            )
            preempted += preemption_targets(state, p, flavor)
        out = {
            "id": cid,
            "admitted": [],
            "preempted": [{"name": p.victim, "reason": p.reason} for p in preempted],
            "pending": [
                {"name": p.name, "reason": "PendingPreemption" if preempted else INADMISSIBLE}
                for p in state.pending
            ],
        }
        pending_by_cq: dict[str, set[str]] = {}
        inadmissible: dict[str, set[str]] = {}
    elif kind in ("schedule_cycle", "admit_until_stable", "schedule_until_stable"):
        if kind == "schedule_cycle":
            res = schedule_cycle(state)
        elif kind == "admit_until_stable":
            res = admit_until_stable(state)
        else:
            res = schedule_until_stable(
                state,
                evicted_finish=bool(case.get("evicted_finish", False)),
                max_cycles=int(case.get("max_cycles", 20)),
            )
        out = {
            "id": cid,
            "admitted": [a.name for a in res.admitted],
            "admitted_flavors": {a.name: _flavor_out(a.flavor, a.flavors) for a in res.admitted},
            "preempted": [
                {"name": p.victim, "reason": p.reason, "message": p.message} for p in res.preempted
            ],
            "pending": [
                {
                    "name": p.name,
                    "cq": p.cq,
                    "reason": p.reason_code,
                    "message": p.message,
                    "position": p.position,
                    "of": p.of,
                    "estimated_start": p.estimated_start,
                    "queue": p.queue,
                }
                for p in res.pending
            ],
            "rejected": [
                {"name": r.name, "reason": r.reason_code, "message": r.message} for r in res.rejected
            ],
        }
        if kind == "schedule_until_stable":
            out["n_cycles"] = res.cycles
            out["cycles"] = [
                {
                    "admitted": [a.name for a in c.admitted],
                    "admitted_flavors": {a.name: _flavor_out(a.flavor, a.flavors) for a in c.admitted},
                    "preempted": [{"name": p.victim, "reason": p.reason} for p in c.preempted],
                }
                for c in res.per_cycle
            ]
            final = {w.name: _flavor_out(w.flavor, w.resource_flavors) for w in state.admitted}
            for c in res.per_cycle:
                for p in c.preempted:
                    final.pop(p.victim, None)
                for a in c.admitted:
                    final[a.name] = _flavor_out(a.flavor, a.flavors)
            out["final_admitted"] = sorted(final)
            out["final_admitted_flavors"] = final
            requeued = {p.name for p in res.pending}
            out["evicted_finished"] = sorted(
                {p.victim for p in res.preempted} - set(final) - requeued
            )
        pending_by_cq = {}
        inadmissible = {}
        for p in res.pending:
            if p.queue == "inadmissible":
                inadmissible.setdefault(p.cq, set()).add(p.name)
            else:
                pending_by_cq.setdefault(p.cq, set()).add(p.name)
    else:
        return CaseOutcome(cid, {"id": cid}, [f"unknown kind {kind!r}"])
    outcome = CaseOutcome(cid, out)
    _check(case.get("expected") or {}, out, pending_by_cq, inadmissible, outcome.failures, kind)
    return outcome


def _flavor_out(flavor: str | None, flavors: Mapping[str, str] | None) -> Any:
    """A string when every resource got one flavor, else {resource: flavor} (the case format)."""
    if flavors and len(set(flavors.values())) > 1:
        return dict(flavors)
    return flavor


def _check(exp, out, pending_by_cq, inadmissible, failures: list[str], kind: str) -> None:
    got_pre = {p["name"]: p["reason"] for p in out["preempted"]}
    if kind == "schedule_until_stable":
        _check_stable(exp, out, failures)
    if "preempted" in exp:
        want = {p["name"]: p.get("reason") for p in exp["preempted"] or []}
        if set(want) != set(got_pre):
            failures.append(f"preempted: expected {sorted(want)}, got {sorted(got_pre)}")
        for name, reason in want.items():
            if reason is not None and name in got_pre and got_pre[name] != reason:
                failures.append(f"preempted[{name}].reason: expected {reason}, got {got_pre[name]}")
    for name in exp.get("not_preempted") or []:
        if name in got_pre:
            failures.append(f"not_preempted: {name} was preempted ({got_pre[name]})")
    if "admitted_this_cycle" in exp and kind != "schedule_until_stable":
        want = sorted(exp["admitted_this_cycle"] or [])
        if want != sorted(out["admitted"]):
            failures.append(f"admitted_this_cycle: expected {want}, got {sorted(out['admitted'])}")
    if exp.get("pending_admitted") is False and out["admitted"]:
        failures.append(f"pending_admitted: expected none admitted, got {out['admitted']}")
    for name, flavor in (exp.get("admitted_flavors") or {}).items():
        got = out.get("admitted_flavors", {}).get(name)
        if got != flavor:
            failures.append(f"admitted_flavors[{name}]: expected {flavor}, got {got}")
    for key, got_map in (("left_pending", pending_by_cq), ("left_inadmissible", inadmissible)):
        for cq, names in (exp.get(key) or {}).items():
            if kind == "preemption_targets":
                continue
            if set(names or []) != got_map.get(cq, set()):
                failures.append(
                    f"{key}[{cq}]: expected {sorted(names or [])}, got {sorted(got_map.get(cq, set()))}"
                )
    if "rejected" in exp:
        want = sorted(exp["rejected"] or [])
        got = sorted(r["name"] for r in out.get("rejected", []))
        if want != got:
            failures.append(f"rejected: expected {want}, got {got}")
    reasons = {p["name"]: p for p in out["pending"]}
    for name, spec in (exp.get("pending_reasons") or {}).items():
        got = reasons.get(name)
        if got is None:
            failures.append(f"pending_reasons[{name}]: not pending")
            continue
        if isinstance(spec, str):
            spec = {"reason": spec}
        for k, v in spec.items():
            if k == "message_contains":
                for part in [v] if isinstance(v, str) else v:
                    if part not in got.get("message", ""):
                        failures.append(
                            f"pending_reasons[{name}].message: {part!r} not in {got.get('message')!r}"
                        )
            elif got.get(k) != v:
                failures.append(f"pending_reasons[{name}].{k}: expected {v!r}, got {got.get(k)!r}")


def _check_stable(exp, out, failures: list[str]) -> None:
    if "n_cycles" in exp and exp["n_cycles"] != out["n_cycles"]:
        failures.append(f"n_cycles: expected {exp['n_cycles']}, got {out['n_cycles']}")
    for i, want in enumerate(exp.get("cycles") or []):
        got = out["cycles"][i] if i < len(out["cycles"]) else {"admitted": [], "admitted_flavors": {}, "preempted": []}
        if sorted(want.get("admitted") or []) != sorted(got["admitted"]):
            failures.append(f"cycles[{i}].admitted: expected {sorted(want.get('admitted') or [])}, got {sorted(got['admitted'])}")
        for name, flavor in (want.get("admitted_flavors") or {}).items():
            if got["admitted_flavors"].get(name) != flavor:
                failures.append(
                    f"cycles[{i}].admitted_flavors[{name}]: expected {flavor}, got {got['admitted_flavors'].get(name)}"
                )
        w = {p["name"]: p.get("reason") for p in want.get("preempted") or []}
        g = {p["name"]: p["reason"] for p in got["preempted"]}
        if w != g:
            failures.append(f"cycles[{i}].preempted: expected {w}, got {g}")
    if "final_admitted" in exp and sorted(exp["final_admitted"] or []) != out["final_admitted"]:
        failures.append(f"final_admitted: expected {sorted(exp['final_admitted'] or [])}, got {out['final_admitted']}")
    for name, flavor in (exp.get("final_admitted_flavors") or {}).items():
        if out["final_admitted_flavors"].get(name) != flavor:
            failures.append(
                f"final_admitted_flavors[{name}]: expected {flavor}, got {out['final_admitted_flavors'].get(name)}"
            )
    if "evicted_finished" in exp and sorted(exp["evicted_finished"] or []) != out["evicted_finished"]:
        failures.append(
            f"evicted_finished: expected {sorted(exp['evicted_finished'] or [])}, got {out['evicted_finished']}"
        )


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return list(raw.get("cases") or [])
