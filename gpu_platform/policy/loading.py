"""Reading a policy: `load_policy` reads a file within `POLICY_LIMITS`, `parse_policy` validates a
mapping against the model (`model.py`) and its cross-reference checks, naming every problem with
its path; `parse_policy_document` never raises anything but PolicyError, whatever shape the
document has. The dependency runs one way: this module imports `model.py`, never the reverse."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpu_platform.devices.sharing import (
    SHARING_MODES,
    is_gpu_resource,
    layout_errors,
    mode_of,
    parse_layout,
)
from gpu_platform.policy.capacity import capacity_signal_errors
from gpu_platform.policy.model import (
    GPU,
    SITE_LABEL,
    Policy,
    PolicyError,
    Sharing,
    offered_capacity,
)
from gpu_platform.safeload import POLICY_LIMITS, InputError, load_document, one_line

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
HOSTNAME_LABEL = "kubernetes.io/hostname"


def topology_level_errors(levels: Any, where: str) -> list[str]:
    """Kueue's Topology rules for `levels` (1-16 node labels, unique, `kubernetes.io/hostname`
    only as the last level), each problem with its path."""
    if levels is None or not isinstance(levels, list | tuple):
        return []
    errors: list[str] = []
    path = f"{where}.topology_levels"
    if len(levels) > 16:
        errors.append(f"{path}: {len(levels)} levels; Kueue's Topology allows at most 16")
    for i, level in enumerate(levels):
        if not isinstance(level, str) or not _LABEL_KEY.match(level) or len(level) > 316:
            errors.append(f"{path}[{i}]: {level!r} is not a node label key")
        elif level == HOSTNAME_LABEL and i != len(levels) - 1:
            errors.append(f"{path}[{i}]: {HOSTNAME_LABEL} must be the last (narrowest) level")
    dup = sorted({x for x in levels if isinstance(x, str) and levels.count(x) > 1})
    if dup:
        errors.append(f"{path}: repeated level(s) {', '.join(dup)}")
    return errors


def _autoscaling_errors(raw: dict[str, Any]) -> list[str]:
    """Cross-references of the autoscaling block (pools have flavors, warm lanes exist and may
    hold that many GPUs in the pool)."""
    block = raw.get("autoscaling")
    if not isinstance(block, dict):
        return []
    errors: list[str] = []
    flavors = [f for f in raw.get("flavors") or [] if isinstance(f, dict)]
    pool_of = {f.get("name"): f.get("node_pool") for f in flavors}
    pools = block.get("node_pools") or {}
    if isinstance(pools, dict):
        for name, cfg in pools.items():
            if name not in pool_of.values():
                errors.append(f"autoscaling.node_pools.{name}: no flavor is in node pool {name!r}")
            if isinstance(cfg, dict):
                lo, hi = cfg.get("min_nodes", 0), cfg.get("max_nodes")
                if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                    errors.append(f"autoscaling.node_pools.{name}.min_nodes: {lo} exceeds max_nodes {hi}")
            if isinstance(cfg, dict):
                errors.extend(topology_level_errors(cfg.get("topology_levels"), f"autoscaling.node_pools.{name}"))
    lanes = raw.get("lanes") if isinstance(raw.get("lanes"), dict) else {}
    for i, w in enumerate(block.get("warm_pools") or []):
        if not isinstance(w, dict):
            continue
        base = f"autoscaling.warm_pools[{i}]"
        lane, pool, gpus = w.get("lane"), w.get("node_pool"), w.get("gpus")
        if lane not in lanes:
            errors.append(f"{base}.lane: unknown lane {lane!r}")
            continue
        if isinstance(pools, dict) and pool not in pools:
            errors.append(f"{base}.node_pool: {pool!r} has no entry in autoscaling.node_pools")
        quotas = [q for q in (lanes[lane] or {}).get("quotas") or [] if isinstance(q, dict)]
        limit = 0.0
        for q in quotas:
            if pool_of.get(q.get("flavor_name")) == pool and q.get("resource", GPU) == GPU:
                nominal = q.get("nominal_quota") or 0
                borrow = q.get("borrowing_limit")
                limit += float(nominal) + (float(borrow) if isinstance(borrow, int | float) else float("inf"))
        if limit == 0:
            errors.append(f"{base}: lane {lane!r} has no GPU quota on a flavor in node pool {pool!r}")
        elif isinstance(gpus, int | float) and gpus > limit:
            errors.append(f"{base}.gpus: {gpus} exceeds the {limit:g} GPUs lane {lane!r} may hold in node pool {pool!r}")
    return errors


MAX_SITES = 20
"""A MultiKueueConfig lists at most 20 clusters (Kueue's CRD)."""


def _site_members(raw: dict[str, Any]) -> dict[str, list[str]]:
    """flavor name -> the sites that list it (by name or by node pool), from the raw mapping."""
    sites = raw.get("sites")
    flavors = [f for f in raw.get("flavors") or [] if isinstance(f, dict)]
    out: dict[str, list[str]] = {}
    if not isinstance(sites, dict):
        return out
    for name, site in sites.items():
        if not isinstance(site, dict):
            continue
        named = site.get("flavors") if isinstance(site.get("flavors"), list) else []
        pools = site.get("node_pools") if isinstance(site.get("node_pools"), list) else []
        for f in flavors:
            if f.get("name") in named or f.get("node_pool") in pools:
                out.setdefault(str(f.get("name")), []).append(str(name))
    return out


def _site_errors(raw: dict[str, Any]) -> list[str]:
    """The `sites:` block: known flavors and node pools, each flavor on one site at most, every
    site holding a flavor, lanes wholly on sites or wholly off them (a ClusterQueue's MultiKueue
    check covers all its flavors), teams naming known sites, at most MAX_SITES sites."""
    sites = raw.get("sites")
    if sites is None:
        return []
    if not isinstance(sites, dict):
        return []  # the schema reports the type
    errors: list[str] = []
    flavors = [f for f in raw.get("flavors") or [] if isinstance(f, dict)]
    names = [f.get("name") for f in flavors]
    pools = {f.get("node_pool") for f in flavors}
    if len(sites) > MAX_SITES:
        errors.append(f"sites: {len(sites)} sites; a MultiKueueConfig lists at most {MAX_SITES} worker clusters")
    members = _site_members(raw)
    for name, site in sites.items():
        if not isinstance(site, dict):
            continue
        base = f"sites.{name}"
        for i, f in enumerate(site.get("flavors") or []):
            if f not in names:
                errors.append(f"{base}.flavors[{i}]: unknown flavor {f!r} (known: {', '.join(map(str, names))})")
        for i, pool in enumerate(site.get("node_pools") or []):
            if pool not in pools:
                errors.append(f"{base}.node_pools[{i}]: no flavor is in node pool {pool!r}")
        if not any(name in held for held in members.values()):
            errors.append(f"{base}: holds no flavor (list its flavors and/or node_pools)")
    for flavor, held in sorted(members.items()):
        if len(held) > 1:
            errors.append(f"sites: flavor {flavor!r} is on sites {', '.join(held)}; a flavor lives on one site")
        labels = next((f.get("node_labels") for f in flavors if f.get("name") == flavor), None)
        if isinstance(labels, dict) and SITE_LABEL in labels and labels[SITE_LABEL] != held[0]:
            errors.append(
                f"flavors.{flavor}.node_labels.{SITE_LABEL}: {labels[SITE_LABEL]!r}, but sites: puts the flavor on {held[0]!r}"
            )
    lanes = raw.get("lanes") if isinstance(raw.get("lanes"), dict) else {}
    for lane_name, lane in lanes.items():
        quotas = [q for q in (lane or {}).get("quotas") or [] if isinstance(q, dict)] if isinstance(lane, dict) else []
        on = sorted({members[q["flavor_name"]][0] for q in quotas if q.get("flavor_name") in members})
        if not on:
            continue
        for i, q in enumerate(quotas):
            if q.get("flavor_name") in names and q.get("flavor_name") not in members:
                errors.append(
                    f"lanes.{lane_name}.quotas[{i}].flavor_name: flavor {q.get('flavor_name')!r} is on no site while the "
                    f"lane's other flavors are on {', '.join(on)}; Kueue's MultiKueue check covers every flavor of a "
                    "ClusterQueue, so a lane runs wholly on sites or wholly on the manager cluster"
                )
    teams = raw.get("teams") if isinstance(raw.get("teams"), dict) else {}
    for team_name, team in teams.items():
        site = team.get("site") if isinstance(team, dict) else None
        if site is not None and site not in sites:
            errors.append(f"teams.{team_name}.site: unknown site {site!r} (sites: {', '.join(map(str, sites))})")
    return errors


def _provisioning_errors(raw: dict[str, Any]) -> list[str]:
    """`autoscaling.provisioning`: its pools have an entry in `autoscaling.node_pools`."""
    block = raw.get("autoscaling")
    prov = block.get("provisioning") if isinstance(block, dict) else None
    if not isinstance(prov, dict):
        return []
    pools = block.get("node_pools") if isinstance(block.get("node_pools"), dict) else {}
    errors = []
    for i, pool in enumerate(prov.get("node_pools") or []):
        if pool not in pools:
            errors.append(f"autoscaling.provisioning.node_pools[{i}]: {pool!r} has no entry in autoscaling.node_pools")
    if prov.get("node_pools") is None and pools and not any(
        isinstance(c, dict) and c.get("min_nodes", 0) == 0 for c in pools.values()
    ):
        errors.append(
            "autoscaling.provisioning.node_pools: no node pool has min_nodes 0 (none scales from zero); name the pools"
        )
    return errors


def _with_site_labels(data: dict[str, Any]) -> dict[str, Any]:
    """The flavors of a site carry its node label (SITE_LABEL), so a Job's flavor affinity keeps
    it to that site's nodes and the manager's ResourceFlavors match only that site's workers."""
    members = _site_members(data)
    if not members or not isinstance(data.get("flavors"), list):
        return data
    flavors = []
    for f in data["flavors"]:
        held = members.get(str(f.get("name"))) if isinstance(f, dict) else None
        labels = f.get("node_labels") if held else None
        if held and (labels is None or isinstance(labels, dict)):
            f = {**f, "node_labels": {**(labels or {}), SITE_LABEL: (labels or {}).get(SITE_LABEL, held[0])}}
        flavors.append(f)
    return {**data, "flavors": flavors}


def default_policy_path() -> Path:
    return Path(__file__).with_name("default.yaml")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _semantic_errors(raw: dict[str, Any]) -> list[str]:
    """Cross-reference checks, run on the raw mapping so they report even when types are wrong."""
    errors: list[str] = []
    flavors = raw.get("flavors") or []
    flavor_names = [f.get("name") for f in flavors if isinstance(f, dict)]
    for name, n in Counter(flavor_names).items():
        if n > 1:
            errors.append(f"flavors: duplicate flavor name {name!r}")
    capacity: dict[Any, dict[str, Any]] = {}
    modes: dict[Any, str] = {}
    for i, f in enumerate(flavors):
        if not isinstance(f, dict):
            continue
        cap = f.get("capacity") or {}
        sharing = f.get("sharing") or {}
        errors.extend(_sharing_errors(f"flavors[{i}].sharing", f, sharing))
        try:
            capacity[f.get("name")] = offered_capacity(cap, Sharing.model_validate(sharing))
        except (ValidationError, ValueError, TypeError):
            capacity[f.get("name")] = dict(cap)
        modes[f.get("name")] = sharing.get("mode", "exclusive") if isinstance(sharing, dict) else "exclusive"
    raw_cohorts = [c for c in raw.get("cohorts") or [] if isinstance(c, dict)]
    cohorts = [c.get("name") for c in raw_cohorts]
    for name, n in Counter(cohorts).items():
        if n > 1:
            errors.append(f"cohorts: duplicate cohort name {name!r}")
    nominal_sum: Counter[tuple[str, str]] = Counter()
    errors.extend(_cohort_tree_errors(raw_cohorts, capacity, nominal_sum))
    lanes = raw.get("lanes") or {}
    if not isinstance(lanes, dict):
        return errors
    for lane_name, lane in lanes.items():
        if not isinstance(lane, dict):
            continue
        base = f"lanes.{lane_name}"
        cohort = lane.get("cohort_name")
        if cohort is not None and cohort not in cohorts:
            errors.append(f"{base}.cohort_name: unknown cohort {cohort!r} (known: {', '.join(map(str, cohorts)) or 'none'})")
        seen: set[tuple[Any, Any]] = set()
        for i, q in enumerate(lane.get("quotas") or []):
            if not isinstance(q, dict):
                continue
            qp = f"{base}.quotas[{i}]"
            errors.extend(_quota_errors(qp, q, capacity, seen, nominal_sum))
            if cohort is None:
                for key in ("borrowing_limit", "lending_limit"):
                    if q.get(key) is not None:
                        errors.append(f"{qp}.{key}: set but lane has no cohort_name")
        for i, other in enumerate(lane.get("yields_to") or []):
            if other not in lanes:
                errors.append(f"{base}.yields_to[{i}]: unknown lane {other!r}")
            elif other == lane_name:
                errors.append(f"{base}.yields_to[{i}]: a lane cannot yield to itself")
        allowed = lane.get("sharing_modes") or SHARING_MODES
        if lane.get("evidence") and "shared" in allowed and "sharing_modes" in lane:
            errors.append(
                f"{base}.sharing_modes: an evidence lane may not use shared GPUs (no memory isolation); use exclusive or mig"
            )
        for i, q in enumerate(lane.get("quotas") or []):
            if isinstance(q, dict) and is_gpu_resource(str(q.get("resource", GPU))):
                mode = mode_of(str(q.get("resource", GPU)))
                if mode not in allowed:
                    errors.append(
                        f"{base}.quotas[{i}].resource: {q.get('resource', GPU)} is {mode}, which the lane's "
                        f"sharing_modes ({', '.join(allowed)}) do not allow"
                    )
        if lane.get("protected") and lane.get("yields_to"):
            errors.append(f"{base}.yields_to: a protected lane is never preempted; remove yields_to or protected")
    for (flavor, resource), total in nominal_sum.items():
        cap = capacity.get(flavor, {}).get(resource)
        if isinstance(cap, int | float) and total > cap:
            errors.append(
                f"flavors.{flavor}.capacity.{resource}: lanes' and cohorts' nominal quotas sum to {total:g}, "
                f"more than the capacity {cap:g}"
            )
    priorities = [
        (name, lane.get("priority")) for name, lane in lanes.items() if isinstance(lane, dict)
    ]
    for prio, n in Counter(p for _, p in priorities if p is not None).items():
        if n > 1:
            names = sorted(name for name, p in priorities if p == prio)
            errors.append(f"lanes: priority {prio} is shared by {', '.join(names)}; lane priorities must be distinct")
    teams = raw.get("teams") or {}
    errors.extend(_team_limit_errors(lanes, teams))
    errors.extend(_admission_fair_sharing_errors(lanes, teams))
    errors.extend(_requires_approval_errors(lanes, raw.get("approvers")))
    if isinstance(teams, dict):
        namespaces = Counter(t.get("namespace") for t in teams.values() if isinstance(t, dict))
        for ns, n in namespaces.items():
            if n > 1 and ns is not None:
                errors.append(f"teams: namespace {ns!r} used by {n} teams")
        errors.extend(_alias_errors(teams))
    return errors


def _alias_errors(teams: dict[str, Any]) -> list[str]:
    """`teams.<t>.aliases` (a renamed team's former names, namespaces it moved out of): an alias
    names one team only, so it may not be another team's name, namespace or alias."""
    errors: list[str] = []
    owner: dict[str, str] = {}
    for name, t in teams.items():
        owner.setdefault(str(name), str(name))
        if isinstance(t, dict) and isinstance(t.get("namespace"), str):
            owner.setdefault(t["namespace"], str(name))
    seen: dict[str, str] = {}
    for name, t in teams.items():
        aliases = t.get("aliases") if isinstance(t, dict) else None
        if not isinstance(aliases, list | tuple):
            continue
        for alias in aliases:
            if not isinstance(alias, str):
                continue
            other = owner.get(alias)
            if other is not None and other != name:
                what = "name" if alias == other else "namespace"
                errors.append(f"teams.{name}.aliases: {alias!r} is team {other}'s {what}; an alias names one team only")
            elif alias in seen and seen[alias] != name:
                errors.append(f"teams.{name}.aliases: {alias!r} is already an alias of team {seen[alias]}")
            seen.setdefault(alias, str(name))
    return errors


def _cohort_root(cohort: Any, parent: dict[Any, Any]) -> Any:
    """The root of a cohort's tree (the cohort itself when unknown or in a cycle)."""
    seen = {cohort}
    while parent.get(cohort) is not None and parent[cohort] not in seen:
        cohort = parent[cohort]
        seen.add(cohort)
    return cohort


def _serving_errors(raw: dict[str, Any]) -> list[str]:
    """Serving lanes (`serving: true`, docs/serving.md): their requests are services, they are
    protected, and no other lane can take their replicas in Kueue either, which knows nothing of
    `protected`. Kueue's rule (pkg/scheduler/preemption, findCandidates): a ClusterQueue preempts
    in another ClusterQueue of its cohort tree only with `reclaim_within_cohort` other than Never,
    only while that queue borrows on a flavor/resource the preemptor asks for, and with
    LowerPriority only workloads of lower priority. So a batch lane reaches a serving lane exactly
    when the serving lane may borrow there (`borrowing_limit` unset or above 0), the batch lane
    has quota on the same flavor and resource in the same tree, and its reclaim is Any, or
    LowerPriority above the serving lane's priority. A serving lane that lends idle GPUs must take
    them back (`reclaim_within_cohort: Any`)."""
    lanes = raw.get("lanes")
    if not isinstance(lanes, dict):
        return []
    errors: list[str] = []
    parent = {c.get("name"): c.get("parent_name") for c in raw.get("cohorts") or [] if isinstance(c, dict)}

    def pre(lane: dict[str, Any]) -> dict[str, Any]:
        p = lane.get("preemption")
        return p if isinstance(p, dict) else {}

    def rows(lane: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        return [(i, q) for i, q in enumerate(lane.get("quotas") or []) if isinstance(q, dict)]

    for name, lane in lanes.items():
        if not isinstance(lane, dict):
            continue
        base = f"lanes.{name}"
        serving = lane.get("serving") is True
        workload = lane.get("default_workload")
        if not serving:
            if workload == "service":
                errors.append(f"{base}.default_workload: service is for serving lanes only (set serving: true)")
            if lane.get("lend_to_evidence") is True:
                errors.append(f"{base}.lend_to_evidence: only a serving lane lends its idle quota (set serving: true)")
            if lane.get("evidence_reclaim_after") is not None:
                errors.append(f"{base}.evidence_reclaim_after: only a serving lane reclaims what it lends (set serving: true)")
            continue
        if lane.get("evidence_reclaim_after") is not None and lane.get("lend_to_evidence") is not True:
            errors.append(
                f"{base}.evidence_reclaim_after: bounds the wait for a borrower's checkpoint, so it needs "
                "lend_to_evidence: true (without it evidence runs never borrow the lane's idle quota)"
            )
        if workload is not None and workload != "service":
            errors.append(f"{base}.default_workload: a serving lane's requests are services (default_workload: service)")
        if lane.get("protected") is not True:
            errors.append(f"{base}.protected: a serving lane must be protected (its replicas are never preemption victims)")
        cohort = lane.get("cohort_name")
        if cohort is None:
            continue
        if any(q.get("lending_limit", None) != 0 for _, q in rows(lane)) and pre(lane).get("reclaim_within_cohort") != "Any":
            errors.append(
                f"{base}.preemption.reclaim_within_cohort: a serving lane that lends idle GPUs (a quota with "
                f"lending_limit unset or above 0) must take them back when it scales up: set Any "
                f"(it is {pre(lane).get('reclaim_within_cohort', 'Never')})"
            )
        root = _cohort_root(cohort, parent)
        prio = lane.get("priority")
        for i, q in rows(lane):
            limit = q.get("borrowing_limit")
            if limit == 0:
                continue
            key = (q.get("flavor_name"), q.get("resource", GPU))
            borrows = "unset (no limit)" if limit is None else f"{limit}"
            for other, ol in lanes.items():
                if other == name or not isinstance(ol, dict) or ol.get("serving") is True:
                    continue
                if ol.get("cohort_name") is None or _cohort_root(ol.get("cohort_name"), parent) != root:
                    continue
                if key not in {(oq.get("flavor_name"), oq.get("resource", GPU)) for _, oq in rows(ol)}:
                    continue
                reclaim = pre(ol).get("reclaim_within_cohort", "Never")
                oprio = ol.get("priority")
                higher = isinstance(prio, int) and isinstance(oprio, int) and oprio > prio
                if reclaim == "Any" or (reclaim == "LowerPriority" and higher):
                    why = "any priority" if reclaim == "Any" else f"priority {oprio} above {name}'s {prio}"
                    errors.append(
                        f"lanes.{other}.preemption.reclaim_within_cohort: {reclaim} ({why}) lets batch lane {other} "
                        f"preempt serving lane {name}'s replicas on {key[0]} ({key[1]}) while {name} borrows there "
                        f"({base}.quotas[{i}].borrowing_limit is {borrows}); set that borrowing_limit to 0 or "
                        f"{other}'s reclaim_within_cohort to Never"
                    )
    return errors


def _requires_approval_errors(lanes: dict[str, Any], approvers: Any) -> list[str]:
    """`lanes.*.requires_approval`: some roster role may grant that kind (else nothing is ever admitted)."""
    errors: list[str] = []
    roles = approvers if isinstance(approvers, dict) else {}
    for lane_name, lane in lanes.items():
        kind = lane.get("requires_approval") if isinstance(lane, dict) else None
        if not isinstance(kind, str):
            continue
        if not any(isinstance(r, dict) and kind in (r.get("may_approve") or ()) for r in roles.values()):
            errors.append(
                f"lanes.{lane_name}.requires_approval: no role of the approvers: roster may approve {kind} "
                "(the lane could never admit a request)"
            )
    return errors


def _team_limit_errors(lanes: dict[str, Any], teams: Any) -> list[str]:
    """`lanes.*.team_limits`: known teams, and every entry caps something."""
    errors: list[str] = []
    for lane_name, lane in lanes.items():
        tl = lane.get("team_limits") if isinstance(lane, dict) else None
        if not isinstance(tl, dict):
            continue
        entries = [("default", tl.get("default"))]
        if isinstance(tl.get("teams"), dict):
            entries += [(f"teams.{t}", cap) for t, cap in tl["teams"].items()]
        for where, cap in entries:
            path = f"lanes.{lane_name}.team_limits.{where}"
            team = where.removeprefix("teams.")
            if where != "default" and isinstance(teams, dict) and team not in teams:
                errors.append(f"{path}: unknown team {team!r} (known: {', '.join(sorted(teams))})")
            if isinstance(cap, dict) and all(cap.get(k) is None for k in ("max_gpus", "max_share", "max_running")):
                errors.append(f"{path}: set at least one of max_gpus, max_share, max_running")
    return errors


def _admission_fair_sharing_errors(lanes: dict[str, Any], teams: Any) -> list[str]:
    """`lanes.*.admission_fair_sharing.team_weights`: every team named is a known team."""
    errors: list[str] = []
    for lane_name, lane in lanes.items():
        afs = lane.get("admission_fair_sharing") if isinstance(lane, dict) else None
        weights = afs.get("team_weights") if isinstance(afs, dict) else None
        if not isinstance(weights, dict) or not isinstance(teams, dict):
            continue
        for team in weights:
            if team not in teams:
                errors.append(
                    f"lanes.{lane_name}.admission_fair_sharing.team_weights.{team}: unknown team {team!r} "
                    f"(known: {', '.join(sorted(teams))})"
                )
    return errors


def _sharing_errors(path: str, flavor: dict[str, Any], sharing: Any) -> list[str]:
    """A flavor's sharing block against its GPU product's real MIG geometry."""
    if not isinstance(sharing, dict):
        return []
    errors: list[str] = []
    mode = sharing.get("mode", "exclusive")
    if mode == "mig":
        raw = sharing.get("layout")
        if raw is None:
            return [f"{path}.layout: required for mode mig (e.g. '7 x 1g.10gb')"]
        try:
            layout = parse_layout(raw)
        except ValueError as exc:
            return [f"{path}.layout: {exc}"]
        errors.extend(f"{path}.layout: {e}" for e in layout_errors(str(flavor.get("gpu_product")), layout))
    elif mode == "shared":
        for key in ("replicas", "replica_memory_gib"):
            if sharing.get(key) is None:
                errors.append(f"{path}.{key}: required for mode shared")
    for key in ("layout", "profile_weights"):
        if mode != "mig" and sharing.get(key) is not None:
            errors.append(f"{path}.{key}: only for mode mig")
    for key in ("replicas", "replica_memory_gib"):
        if mode != "shared" and sharing.get(key) is not None:
            errors.append(f"{path}.{key}: only for mode shared")
    return errors


def _quota_errors(
    qp: str,
    q: dict[str, Any],
    capacity: dict[Any, dict[str, Any]],
    seen: set[tuple[Any, Any]],
    nominal_sum: Counter[tuple[str, str]],
    lending_within_nominal: bool = True,
) -> list[str]:
    """One quota row. lending_within_nominal: a lane may not lend more than its nominal quota
    (Kueue's ClusterQueue webhook); a cohort may, since its lending limit counts its subtree."""
    errors: list[str] = []
    flavor = q.get("flavor_name")
    resource = q.get("resource", "nvidia.com/gpu")
    if flavor not in capacity:
        errors.append(f"{qp}.flavor_name: unknown flavor {flavor!r} (known: {', '.join(map(str, capacity))})")
    elif resource not in capacity[flavor]:
        offered = ", ".join(sorted(capacity[flavor]))
        errors.append(f"{qp}.resource: flavor {flavor!r} offers no {resource!r} (it offers: {offered})")
    if (flavor, resource) in seen:
        errors.append(f"{qp}: duplicate quota for ({flavor}, {resource})")
    seen.add((flavor, resource))
    nominal = q.get("nominal_quota")
    lending = q.get("lending_limit")
    if (
        lending_within_nominal
        and isinstance(nominal, int | float)
        and isinstance(lending, int | float)
        and lending > nominal
    ):
        errors.append(f"{qp}.lending_limit: {lending} exceeds nominal_quota {nominal}")
    if isinstance(nominal, int | float) and nominal >= 0:
        nominal_sum[(flavor, resource)] += nominal
    return errors


def _cohort_tree_errors(
    cohorts: list[dict[str, Any]], capacity: dict[Any, dict[str, Any]], nominal_sum: Counter[tuple[str, str]]
) -> list[str]:
    """The cohort tree: known parents, no cycle, limits only below a root, valid quotas."""
    errors: list[str] = []
    names = {c.get("name") for c in cohorts}
    parent = {c.get("name"): c.get("parent_name") for c in cohorts}
    for i, c in enumerate(cohorts):
        base = f"cohorts[{i}]"
        p = c.get("parent_name")
        if p is not None and p not in names:
            errors.append(f"{base}.parent_name: unknown cohort {p!r} (known: {', '.join(sorted(map(str, names)))})")
        seen_chain = {c.get("name")}
        while p is not None and p in parent:
            if p in seen_chain:
                errors.append(f"{base}.parent_name: the cohort tree has a cycle through {c.get('name')!r}")
                break
            seen_chain.add(p)
            p = parent[p]
        seen: set[tuple[Any, Any]] = set()
        for j, q in enumerate(c.get("quotas") or []):
            if not isinstance(q, dict):
                continue
            qp = f"{base}.quotas[{j}]"
            errors.extend(_quota_errors(qp, q, capacity, seen, nominal_sum, lending_within_nominal=False))
            if c.get("parent_name") is None:
                for key in ("borrowing_limit", "lending_limit"):
                    if q.get(key) is not None:
                        errors.append(f"{qp}.{key}: set on root cohort {c.get('name')!r}; limits need a parent_name")
    return errors


def parse_policy(raw: Any, source: str = "policy") -> Policy:
    """Validate a policy mapping; raise PolicyError naming every problem with its path."""
    if not isinstance(raw, dict):
        raise PolicyError([f"<root>: expected a mapping, got {type(raw).__name__}"], source)
    data = dict(raw)
    errors: list[str] = []
    lanes = data.get("lanes")
    if isinstance(lanes, dict):
        data["lanes"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in lanes.items()}
    teams = data.get("teams")
    if isinstance(teams, dict):
        data["teams"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in teams.items()}
    sites = data.get("sites")
    if isinstance(sites, dict):
        data["sites"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in sites.items()}
    data = _with_site_labels(data)
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            errors.append(f"{_path(loc)}: {err['msg'].removeprefix('Value error, ')}")
    errors.extend(_semantic_errors(data))
    errors.extend(_autoscaling_errors(data))
    errors.extend(_provisioning_errors(data))
    errors.extend(_site_errors(data))
    errors.extend(_serving_errors(data))
    for i, f in enumerate(data.get("flavors") or []):
        if isinstance(f, dict):
            errors.extend(topology_level_errors(f.get("topology_levels"), f"flavors[{i}]"))
    errors.extend(capacity_signal_errors(data))
    if errors:
        raise PolicyError(sorted(dict.fromkeys(errors)), source)
    assert policy is not None
    return policy


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate a policy file (default: the packaged `default.yaml`), read within
    `POLICY_LIMITS` (see `gpu_platform.safeload`)."""
    p = Path(path) if path is not None else default_policy_path()
    try:
        raw = load_document(p, POLICY_LIMITS)
    except InputError as exc:
        raise PolicyError(exc.errors, str(p)) from None
    return parse_policy_document(raw, str(p))


_LOADED: dict[str, tuple[bytes, Policy]] = {}


def load_policy_cached(path: str | Path | None = None) -> Policy:
    """`load_policy`, parsed again only when the file's content changed (its SHA-256): the gate
    reads the policy on every tick, and parsing and checking it costs ~0.1 s of the tick. A file
    over `POLICY_LIMITS`, or one that cannot be read, goes to `load_policy` for its error."""
    p = Path(path) if path is not None else default_policy_path()
    try:
        if p.stat().st_size > POLICY_LIMITS.max_bytes:
            return load_policy(p)
        digest = hashlib.sha256(p.read_bytes()).digest()
    except OSError:
        return load_policy(p)
    key = str(p.resolve())
    hit = _LOADED.get(key)
    if hit is not None and hit[0] == digest:
        return hit[1]
    policy = load_policy(p)
    _LOADED[key] = (digest, policy)
    return policy


def _named(mapping: Any) -> Any:
    if not isinstance(mapping, dict):
        return mapping
    return {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in mapping.items()}


def schema_errors(raw: dict[str, Any]) -> list[str]:
    """The schema's errors alone, each with its path (what `parse_policy` reports first)."""
    data = {**raw, "lanes": _named(raw.get("lanes")), "teams": _named(raw.get("teams"))}
    if "sites" in raw:
        data["sites"] = _named(raw.get("sites"))
    data = {k: v for k, v in data.items() if v is not None or k in raw}
    try:
        Policy.model_validate(data)
    except ValidationError as exc:
        return sorted(
            {
                f"{_path(tuple(p for p in e['loc'] if not (isinstance(p, str) and p.startswith('function-'))))}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            }
        )
    return []


def parse_policy_document(raw: Any, source: str) -> Policy:
    """`parse_policy`, with any failure of its cross-reference checks on a malformed document
    turned into the schema errors that explain it; every problem is one printable line."""
    try:
        return parse_policy(raw, source)
    except PolicyError as exc:
        raise PolicyError([one_line(e) for e in exc.errors], source) from None
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as exc:
        errors = schema_errors(raw) if isinstance(raw, dict) else []
        if not errors:
            errors = [f"<root>: cannot be checked ({type(exc).__name__}: {str(exc)[:200]})"]
        raise PolicyError([one_line(e) for e in errors], source) from None
