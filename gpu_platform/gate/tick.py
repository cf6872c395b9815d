"""The admission gate's decisions for one sensor tick, free of Dagster.

`plan_tick` turns the ledger's view (pending and admitted requests) into an admission state,
runs admission cycles back to back until nothing more is admitted, and returns what to do:
requests to launch (with their run key and tags), requests that wait (reason and position),
running requests to preempt, and requests to reject. `record_plan` writes those decisions to the
ledger, admissions first, so a crash after recording never loses a launch: the next tick
re-emits a run request for every admitted request that has no run, and Dagster's run keys make
that launch happen at most once.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.engine import gc_paused as engine_gc_paused
from gpu_platform.admission.model import (
    ClusterState,
    CycleResult,
    PendingInfo,
    Preemption,
    Rejection,
    Workload,
)
from gpu_platform.admission.policy_view import AdmittedRequest, from_policy, workload_for
from gpu_platform.admission.reservation import reservations_for
from gpu_platform.gate.blockers import PreemptedBy, name_blockers, who
from gpu_platform.gate.instance_config import PRIORITY_TAG, team_limit_tags
from gpu_platform.policy import Policy
from gpu_platform.policy.aging import AgingRule, aging_rules
from gpu_platform.requests.approvals import admission_approval_problem, honoured_kinds
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, RequestState
from gpu_platform.requests.model import JobRequest

TAG_REQUEST_ID = "gpu-platform/request-id"
TAG_LANE = "gpu-platform/lane"
TAG_TEAM = "gpu-platform/team"
TAG_COST_CENTER = "gpu-platform/cost-center"
TAG_FLAVOR = "gpu-platform/flavor"
TAG_ATTEMPT = "gpu-platform/attempt"
TAG_WORKLOAD = "gpu-platform/workload"
TAG_NAME = "gpu-platform/name"
TAG_OWNER = "gpu-platform/owner"
TAG_TARGET = "gpu-platform/target"
"""The request's human name, owner and target on its runs: Dagster runs have no name of their
own, so the run list shows these tags (and filters by them: `gpu-platform/owner=ana@example.com`)."""
TAG_PRIORITY = PRIORITY_TAG


def gc_paused() -> contextlib.AbstractContextManager[None]:
    """The cyclic garbage collector paused for one tick (as the engine pauses it for its cycles).

    A tick allocates some objects per live request (states, waits, queue rows) that live until
    the tick ends and die by reference counting; with the collector running they are promoted
    to the oldest generation and set off full collections, which walk every object the process
    holds (the parsed requests and workloads kept between ticks): 0.16 s every other tick at
    5,000 pending. What a tick leaves behind is collected after it as usual."""
    return engine_gc_paused()


def run_key(request_id: str, attempt: int) -> str:
    return f"{request_id}#{attempt}"


def dagster_priority(policy: Policy, lane: str) -> int:
    """Dagster run priority from the lane: the lane's rank, highest lane highest."""
    ranked = [lane_.name for lane_ in sorted(policy.lanes.values(), key=lambda x: x.priority)]
    return ranked.index(lane) if lane in ranked else 0


@dataclass(frozen=True, slots=True)
class Launch:
    request_id: str
    attempt: int
    flavor: str
    workload: str
    run_key: str
    tags: Mapping[str, str]
    message: str = ""


@dataclass(slots=True)
class TickPlan:
    launches: list[Launch] = field(default_factory=list)
    waits: list[PendingInfo] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    cycles: int = 0

    @property
    def nothing_to_do(self) -> bool:
        return not (self.launches or self.preemptions or self.rejections)


_NONE: frozenset[str] = frozenset()


def _ts(dt: datetime) -> float:
    return dt.timestamp()


def budget_period_start(period: str, now: datetime) -> datetime:
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def build_state(
    policy: Policy,
    states: Iterable[RequestState],
    now: datetime,
    checkpointed: Callable[[str], bool] = lambda _rid: False,
    spent: Mapping[str, Decimal] | None = None,
    holding: Mapping[str, str] | None = None,
    node_model: bool = False,
    team_usage: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    replicas: Mapping[str, int] | None = None,
) -> ClusterState:
    """The admission engine's input from the policy and the ledger's pending and admitted requests.

    team_usage: lane -> team -> decayed usage of the lanes with Admission Fair Sharing, as Kueue
    reports it on each team's LocalQueue (`cluster.readback.read_team_usage`); None: none yet.

    replicas: an admitted service's request id -> the replicas it holds now (the ledger's
    `current_replicas`, kept by the replicas sensor); a service not in it holds its min.

    node_model: place GPUs on the nodes of the policy's node shapes, so a gang waits for whole
    free nodes (the gate in front of a cluster); False: quota only (the local executor runs on one
    machine, whose inventory the policy's node shapes do not describe).

    spent: budget already reserved per lane in the current period (`Ledger.reserved_by_lane`).
    holding: preempted requests whose run is still stopping -> the flavor it holds. Their pods
    still hold the GPUs (and, on a cluster, Kueue still counts their quota), so they count as
    admitted here, and are never chosen as victims a second time.
    Queue order is submission order (`submitted_at`), kept across preemption and requeue.
    Priorities are effective ones: a pending request of a lane that ages has the boost it has
    earned by `now`, an admitted one the boost it had when admitted (`aged_pending`,
    `aged_admitted`; docs/policy.md, Aging).
    An admitted request's flavor is the one Kueue assigned when the cluster said so
    (`RequestState.cluster_flavor`), else the gate's. Safety and cost approvals come from the
    ledger's `approved` events that the policy's approver roster still allows.
    """
    holding = dict(holding or {})
    states = states if isinstance(states, list) else list(states)
    last = _LAST_SPLIT
    if not holding and last and last[0] is policy and _same_objects(last[1], states) and not _any_approvals(states):
        # the same state objects (and no approvals, whose lifetime runs with the clock) as last time: the same pending workloads, the same admitted
        # requests (their checkpoints are looked at again: a run writes them as it goes)
        active, pending = last[2], list(last[3])
    else:
        active, pending = [], []  # active: (state, approval kinds, stopping) in states order
        for s in states:
            if s.request.lane not in policy.lanes:
                continue
            kinds = honoured_kinds(policy, s.approvals, now, s.request) if s.approvals else _NONE
            if s.request_id in holding:
                active.append((s, kinds, True))
            elif s.state in ACTIVE_STATES:
                active.append((s, kinds, False))
            elif s.state in PENDING_STATES:
                pending.append(_pending_workload(policy, s, kinds))
        _LAST_SPLIT[:] = [] if holding else [policy, list(states), active, list(pending)]
    replicas = replicas or {}
    admitted = [
        AdmittedRequest(s.request, holding[s.request_id], _ts(s.updated_at), False, s.request_id, kinds,
                        replicas=replicas.get(s.request_id))
        if stopping
        else AdmittedRequest(
            s.request, s.cluster_flavor or s.flavor, _ts(s.updated_at), checkpointed(s.request_id), s.request_id, kinds,
            replicas=replicas.get(s.request_id),
        )
        for s, kinds, stopping in active
    ]
    rules = aging_rules(policy)
    if rules:
        pending = aged_pending(rules, pending, _ts(now))
    state = from_policy(
        policy, admitted, pending, budget_spent=spent, now=_ts(now), node_model=node_model, team_usage=team_usage
    )
    if rules:
        submitted = {s.request_id: _ts(s.submitted_at) for s, _kinds, _stopping in active if s.request.lane in rules}
        if submitted:
            state = replace(state, admitted=tuple(aged_admitted(rules, state.admitted, submitted)))
    if holding:
        # An evidence workload without a checkpoint is never a victim: the engine's own way of
        # keeping a stopping run out of a second victim search. Admitted now, so that no serving
        # lane's bounded wait for a checkpoint (`evidence_reclaim_after`) has run out for it; its
        # expected end is kept.
        state = replace(state, admitted=tuple(_stopping(w, state.now) if w.name in holding else w for w in state.admitted))
    reservations = reservations_for(state)  # lanes with a wait target: their heads' GPUs
    if reservations:
        state = replace(state, reservations=reservations)
    return state


def _stopping(w: Workload, now: float) -> Workload:
    """A run still stopping as the engine must see it: never a victim again (an evidence run without
    a checkpoint, admitted at `now`), expected to end when it was (`expected_duration_s` shifted)."""
    d = w.expected_duration_s
    left = None if d is None else max(0.0, w.admitted_at + d - now)
    return replace(w, evidence=True, checkpointed=False, admitted_at=now, expected_duration_s=left)


_AGED: dict[str, tuple[Workload, int, Workload]] = {}
"""aged_pending's boosted workloads: name -> (base workload, boost, boosted workload)."""


def aged_pending(rules: Mapping[str, AgingRule], pending: list[Workload], now: float) -> list[Workload]:
    """The pending workloads at their effective priority at `now`: base + the boost they have
    earned waiting since their submission (`created_at`), as Kueue adds the Workload's
    `kueue.x-k8s.io/priority-boost` and as the simulator ages them (`gpu_platform.policy.aging`)."""
    out: list[Workload] = []
    for w in pending:
        rule = rules.get(w.cq)
        b = rule.boost(now - w.created_at) if rule is not None else 0
        if not b:
            out.append(w)
            continue
        hit = _AGED.get(w.name)
        if hit is not None and hit[0] is w and hit[1] == b:
            out.append(hit[2])
            continue
        aged = replace(w, priority=w.priority + b)
        if len(_AGED) >= _WORKLOADS_MAX:
            _AGED.clear()
        _AGED[w.name] = (w, b, aged)
        out.append(aged)
    return out


def aged_admitted(
    rules: Mapping[str, AgingRule], admitted: Iterable[Workload], submitted: Mapping[str, float]
) -> list[Workload]:
    """Admitted workloads keep the boost they had when admitted (the gate never changes the
    annotation of an admitted Workload; the simulator keeps a running job's priority): base +
    the boost of the wait from submission to admission (`admitted_at`)."""
    out: list[Workload] = []
    for w in admitted:
        rule, t0 = rules.get(w.cq), submitted.get(w.name)
        b = rule.boost(w.admitted_at - t0) if rule is not None and t0 is not None else 0
        out.append(replace(w, priority=w.priority + b) if b else w)
    return out


def _same_objects(a: list[RequestState], b: list[RequestState]) -> bool:
    """The same RequestState objects in the same order (`Ledger.states` hands out the same object
    while its row is unchanged, so a steady queue gives the same list again)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


_LAST_SPLIT: list = []
"""build_state's last split of its states: [policy, states, active (state, kinds), pending workloads]."""
_LAST_HELD: list = []
"""plan_tick's last requests held back before admission: [policy, states, unapproved, upstream]."""


def _any_approvals(states: list[RequestState]) -> bool:
    """Whether a state carries approvals: what they allow depends on the time too (approvals.ttl)."""
    return any(s.approvals for s in states)


def _held_back(
    policy: Policy, states: list[RequestState], now: datetime | None = None
) -> tuple[dict[str, PendingInfo], dict[str, PendingInfo]]:
    """(awaiting_approval, waiting_for_upstream less those) of `states`: functions of the policy
    and the states alone (and of `now` where a state has approvals), so the same objects as last
    tick give last tick's answer."""
    last = _LAST_HELD
    if last and last[0] is policy and _same_objects(last[1], states) and not _any_approvals(states):
        return dict(last[2]), dict(last[3])
    unapproved = awaiting_approval(policy, states, now)
    upstream = {k: v for k, v in waiting_for_upstream(states).items() if k not in unapproved}
    _LAST_HELD[:] = [policy, list(states), dict(unapproved), dict(upstream)]
    return unapproved, upstream


_WORKLOADS: dict[str, tuple[JobRequest, datetime, Policy, frozenset[str], Workload]] = {}
_WORKLOADS_MAX = 200_000


def _pending_workload(policy: Policy, s: RequestState, kinds: frozenset[str]) -> Workload:
    """A pending request's workload, built again only when what it is made of changed: its
    request object (`Ledger.states` keeps the parsed request of a request id, `request_from_payload`
    too), its submission time, its honoured approvals or the policy object (`load_policy_cached`
    hands out the same Policy while its file is unchanged). A new waiting row (another position
    or reason) changes none of them: most of a long queue does not need a new workload after
    the queue moved."""
    hit = _WORKLOADS.get(s.request_id)
    if (
        hit is not None
        and hit[0] is s.request
        and hit[2] is policy
        and hit[3] == kinds
        and hit[1] == s.submitted_at
    ):
        return hit[4]
    w = workload_for(policy, s.request, s.request_id, created_at=_ts(s.submitted_at), approvals=kinds)
    if len(_WORKLOADS) >= _WORKLOADS_MAX:
        _WORKLOADS.clear()
    _WORKLOADS[s.request_id] = (s.request, s.submitted_at, policy, kinds, w)
    return w


def held_preemptors(states: Iterable[RequestState], holding: Mapping[str, str]) -> dict[str, PendingInfo]:
    """Pending preemptors whose victims' runs are still stopping: held back until they are gone.

    On a cluster this is what keeps Kueue from choosing victims of its own: the preemptor's Job is
    created only once the victims the gate chose (under the lane rules) have released their
    quota, so Kueue finds room and preempts nothing.
    """
    if not holding:  # only a request still stopping can hold its preemptor back
        return {}
    by_preemptor: dict[str, list[str]] = {}
    states = list(states)
    for s in states:
        by = s.details.get("preempted_by") if s.request_id in holding else None
        if by:
            by_preemptor.setdefault(str(by), []).append(s.request_id)
    held: dict[str, PendingInfo] = {}
    for s in states:
        victims = by_preemptor.get(s.request_id)
        if victims and s.state in PENDING_STATES:
            held[s.request_id] = _held(
                s, "WaitingForPreemptedVictims", f"{', '.join(sorted(victims))} still stopping (their quota is not free yet)"
            )
    return held


def _held(s: RequestState, code: str, text: str) -> PendingInfo:
    """A pending request the gate holds back before admission, with its reason."""
    return PendingInfo(
        name=s.request_id,
        cq=s.request.lane or "",
        reason_code=code,
        condition="QuotaReserved",
        message=f"{code}: {text}",
        position=0,
        of=0,
    )


def waiting_for_upstream(states: Iterable[RequestState]) -> dict[str, PendingInfo]:
    """Pending requests whose inputs are outputs of requests not yet finished (pending or running).

    They wait with reason `WaitingForUpstream` instead of taking quota for work that cannot start;
    a producer that failed is not waited for (the release checks then refuse the gap).
    """
    states = list(states)
    # only the outputs some pending request takes as input can make one wait (most take none)
    inputs: list[tuple[RequestState, tuple[str, ...]]] = []
    for s in states:
        if s.state in PENDING_STATES:
            ids = _input_ids(s.request)
            if ids:
                inputs.append((s, ids))
    if not inputs:
        return {}
    wanted = {i for _, ids in inputs for i in ids}
    producers: dict[str, RequestState] = {}
    for s in states:
        for out in s.request.output_artifact_ids:
            if out in wanted:
                producers[out] = s
    blocked: dict[str, PendingInfo] = {}
    if not producers:
        return blocked
    produced = producers.keys()
    for s, ids in inputs:
        if produced.isdisjoint(ids):
            continue
        waits_on = [(i, producers[i]) for i in ids if i in producers and producers[i].request_id != s.request_id]
        if waits_on:
            what = ", ".join(f"{i} from {p.request_id} ({p.state})" for i, p in waits_on)
            blocked[s.request_id] = _held(s, "WaitingForUpstream", f"needs {what}")
    return blocked


_INPUTS: dict[int, tuple[JobRequest, tuple[str, ...]]] = {}


def _input_ids(req: JobRequest) -> tuple[str, ...]:
    """`req.input_ids`, kept for the (frozen) request object while it lives in the cache (which
    holds it, so its id is not reused): asked for every pending request on every tick."""
    hit = _INPUTS.get(id(req))
    if hit is not None and hit[0] is req:
        return hit[1]
    if len(_INPUTS) >= _WORKLOADS_MAX:
        _INPUTS.clear()
    ids = req.input_ids
    _INPUTS[id(req)] = (req, ids)
    return ids


def awaiting_approval(
    policy: Policy, states: Iterable[RequestState], now: datetime | None = None
) -> dict[str, PendingInfo]:
    """Pending requests of a lane with `requires_approval` (the incident lane) that no allowed
    roster member has approved (`gpu-platform approve --kind incident`), or whose approval expired
    by `now` (approvals.ttl): they wait with reason `ApprovalRequired`, naming the nominated
    approver and the roles, and take no quota. A request's `approver` field grants nothing."""
    # a lane without `requires_approval` holds nothing back (`admission_approval_problem` says None)
    lanes = {name for name, lane in policy.lanes.items() if lane.requires_approval is not None}
    held: dict[str, PendingInfo] = {}
    if not lanes:
        return held
    for s in states:
        if s.state not in PENDING_STATES or (s.request.lane or "") not in lanes:
            continue
        why = admission_approval_problem(policy, s.request, s.approvals or (), s.request_id, now)
        if why:
            held[s.request_id] = _held(s, "ApprovalRequired", why)
    return held


def plan_tick(
    policy: Policy,
    states: list[RequestState],
    now: datetime,
    checkpointed: Callable[[str], bool] = lambda _rid: False,
    max_cycles: int = 64,
    draining: Iterable[str] = (),
    spent: Mapping[str, Decimal] | None = None,
    holding: Mapping[str, str] | None = None,
    node_model: bool = False,
    preempted: Mapping[str, PreemptedBy] | None = None,
    checkpoint_of: Callable[[str], Path | None] = lambda _rid: None,
    team_usage: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    replicas: Mapping[str, int] | None = None,
) -> TickPlan:
    """Run admission cycles until nothing more is admitted; return the tick's decisions.

    Each wait's reason is the engine's, followed by what blocks it by name (`name_blockers`):
    the requests holding the GPUs it can use and when they are expected free, and for a victim
    pending again after a preemption (`preempted`, from `preemptions_of`) its preemptor and the
    checkpoint it resumes from (`checkpoint_of`: a request's newest checkpoint file).

    draining: requests whose previous run is still stopping; they are not admitted this tick.
    holding: those of them whose run still holds a flavor (request -> flavor): they keep its
    quota until the run is gone, and the requests that preempted them wait
    (`WaitingForPreemptedVictims`) instead of being launched onto GPUs still in use.
    node_model: see `build_state` (True for the gate with the k8s executor).
    team_usage: see `build_state` (the k8s gate reads it from the teams' LocalQueues).
    replicas: see `build_state` (services' current replicas).
    """
    holding = {k: v for k, v in (holding or {}).items() if v}
    everyone = list(states)
    skip = set(draining) - set(holding)
    # one reason per waiting request: an approval first (a person must act), then its inputs
    unapproved, upstream = _held_back(policy, everyone, now)
    held = {k: v for k, v in held_preemptors(states, holding).items() if k not in unapproved}
    out = skip | upstream.keys() | held.keys() | unapproved.keys()
    if out:
        states = [s for s in states if s.request_id not in out]
    by_id = {s.request_id: s for s in states}
    state = build_state(policy, states, now, checkpointed, spent, holding, node_model, team_usage, replicas)
    result: CycleResult = admit_until_stable(state, max_cycles=max_cycles)
    plan = TickPlan(waits=list(result.pending), preemptions=list(result.preempted), rejections=list(result.rejected))
    plan.waits.extend(upstream.values())
    plan.waits.extend(held.values())
    plan.waits.extend(unapproved.values())
    plan.waits = name_blockers(
        policy,
        everyone,
        plan.waits,
        holding=holding,
        admitted_now={adm.name: adm.flavor for adm in result.admitted},
        now=now,
        preempted=preempted,
        checkpoint_of=checkpoint_of,
    )
    plan.cycles = result.cycles
    for adm in result.admitted:
        s = by_id[adm.name]
        plan.launches.append(launch_for(policy, s, s.attempts + 1, adm.flavor, adm.message))
    return plan


def launch_for(policy: Policy, s: RequestState, attempt: int, flavor: str, message: str = "") -> Launch:
    """The run to launch for one attempt of a request: run key and the run's tags."""
    req = s.request
    tags = {
        TAG_REQUEST_ID: s.request_id,
        TAG_LANE: req.lane or "",
        TAG_TEAM: req.team or "",
        TAG_COST_CENTER: req.cost_center or "",
        TAG_FLAVOR: flavor,
        TAG_ATTEMPT: str(attempt),
        TAG_WORKLOAD: req.workload or "",
        TAG_NAME: req.name or s.request_id,
        TAG_OWNER: req.owner or "",
        TAG_TARGET: req.target,
        TAG_PRIORITY: str(dagster_priority(policy, req.lane or "")),
        **team_limit_tags(policy, req.lane or "", req.team),
    }
    return Launch(s.request_id, attempt, flavor, req.workload or "", run_key(s.request_id, attempt), tags, message)


def record_plan(ledger: Ledger, plan: TickPlan, states: list[RequestState], hostname: str | None = None) -> int:
    """Write the tick's decisions to the ledger; waiting rows only when the reason or position changed.

    hostname: the node admitted work runs on when the gate knows it (the local executor's machine);
    None on Kubernetes, where the scheduler places the pod.
    """
    by_id = {s.request_id: s for s in states}
    rows: list[tuple[str, str, str, str | None, str | None, Mapping[str, object] | None]] = []
    for launch in plan.launches:
        details: dict[str, object] = {"run_key": launch.run_key, "attempt": launch.attempt}
        if hostname:
            details["hostname"] = hostname
        rows.append(
            (launch.request_id, "admitted", launch.message or f"QuotaReserved on {launch.flavor}", launch.flavor, None, details)
        )
    for p in plan.preemptions:
        reason = f"Preempted ({p.reason}): {p.message}"
        rows.append((p.victim, "preempted", reason, None, None, {"by": p.preemptor, "kueue_reason": p.reason}))
        rows.append(
            (
                p.victim,
                "requeued",
                f"requeued in its original queue order after preemption by {p.preemptor}"
                + (f" ({who(p.preemptor, by_id[p.preemptor].request)})" if p.preemptor in by_id else ""),
                None,
                None,
                {"preempted_by": p.preemptor},
            )
        )
    for r in plan.rejections:
        rows.append((r.name, "rejected", f"{r.reason_code}: {r.message}", None, None, None))
    for w in plan.waits:
        prev = by_id.get(w.name)
        if prev is not None and prev.state == "waiting" and prev.reason == w.message and prev.details.get("position") == w.position:
            continue
        details = {"position": w.position, "of": w.of, "reason_code": w.reason_code, "condition": w.condition}
        if w.estimated_start is not None:
            details["estimated_start"] = datetime.fromtimestamp(w.estimated_start, UTC).isoformat()
        rows.append((w.name, "waiting", w.message, None, None, details))
    return ledger.record_many(rows)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A Dagster run of a request as the gate sees it. status: active | success | failure | canceled.

    phase: the run's Dagster status name (`NOT_STARTED`, `STARTING`, `STARTED`, ...).
    starting_for: seconds the run has been `NOT_STARTED` or `STARTING`; None in any other phase
    (a `QUEUED` run waits for run-level concurrency, which is not a fault).
    """

    run_id: str
    request_id: str
    attempt: int
    status: str
    flavor: str = ""
    phase: str = ""
    starting_for: float | None = None


@dataclass(slots=True)
class Reconciliation:
    """What the ledger and the runs disagree on, and how the gate settles it."""

    events: list[tuple[str, str, str, str | None, str | None, Mapping[str, object] | None]] = field(default_factory=list)
    terminate: list[RunInfo] = field(default_factory=list)
    relaunch: list[Launch] = field(default_factory=list)
    draining: set[str] = field(default_factory=set)
    holding: dict[str, str] = field(default_factory=dict)
    """Draining requests -> the flavor their stopping run still holds ("" when unknown)."""


def reconcile(
    policy: Policy, states: list[RequestState], runs: Iterable[RunInfo], start_timeout: float | None = None
) -> Reconciliation:
    """Settle the ledger against the runs that exist.

    - an admitted request whose run finished: `finished` / `failed` (a run canceled without a
      preemption on record also counts as failed);
    - an admitted request with no run: launch it again under the same run key (a crash between
      recording and launching; the run key makes this a no-op if the run was in fact created);
    - a live run whose attempt is not the request's current admitted attempt (a preempted victim
      whose termination was not carried out): terminate it; the request drains meanwhile and is
      not relaunched until its old run has stopped;
    - the current run stuck `NOT_STARTED` / `STARTING` for more than `start_timeout` seconds (a
      daemon that died between creating the run and launching it, a launcher that never picked
      it up): the run is terminated and the request relaunched under its next attempt, recorded
      as an `admitted` event with reason code `StartTimeout` (it keeps its quota and flavor).
    """
    out = Reconciliation()
    by_req: dict[str, list[RunInfo]] = {}
    for r in runs:
        by_req.setdefault(r.request_id, []).append(r)
    for s in states:
        mine = by_req.get(s.request_id)
        if mine is None:
            if s.state not in ACTIVE_STATES:
                continue  # no run and none due: nothing to settle (most of a long queue)
            mine = []
        current = s.attempts if s.state in ACTIVE_STATES else None
        for r in mine:
            if r.status == "active" and r.attempt != current:
                out.terminate.append(r)
                out.draining.add(s.request_id)
                out.holding[s.request_id] = r.flavor or out.holding.get(s.request_id, "")
        if current is None:
            continue
        run = next((r for r in mine if r.attempt == current), None)
        if run is None:
            out.relaunch.append(launch_for(policy, s, current, s.flavor or ""))
        elif (
            run.status == "active"
            and start_timeout is not None
            and run.starting_for is not None
            and run.starting_for > start_timeout
        ):
            nxt = current + 1
            out.terminate.append(run)
            out.events.append(
                (
                    s.request_id,
                    "admitted",
                    f"StartTimeout: run {run.run_id} stayed {run.phase or 'NOT_STARTED'} for "
                    f"{run.starting_for:.0f}s (limit {start_timeout:g}s); relaunched as attempt {nxt}",
                    s.flavor,
                    None,
                    {"attempt": nxt, "run_key": run_key(s.request_id, nxt), "previous_run": run.run_id,
                     "reason_code": "StartTimeout"},
                )
            )
            out.relaunch.append(launch_for(policy, s, nxt, s.flavor or ""))
        elif run.status == "success":
            out.events.append((s.request_id, "finished", f"run {run.run_id} succeeded", s.flavor, run.run_id, None))
        elif run.status in ("failure", "canceled"):
            out.events.append((s.request_id, "failed", f"run {run.run_id} ended: {run.status}", s.flavor, run.run_id, None))
    return out
