"""Reasons that name the blocker: who holds the GPUs a waiting request could use, and when they
are expected back; for a preemption victim, who preempted it and where it will resume.

Built on top of the admission engine's result, never inside it: the engine's reason (quota,
flavor, placement, ...) stays as it is, first, and `name_blockers` appends what a person needs
to act on it. The names come from the ledger's view of the requests (`RequestState`), the
expected free time from each holder's admission time plus its `expected_duration`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpu_platform.admission.model import PendingInfo
from gpu_platform.gate.checkpoints import CHECKPOINT_GLOB
from gpu_platform.policy import GPU, Policy
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, RequestState
from gpu_platform.requests.model import JobRequest, matching_flavors

NOT_BLOCKED_BY_HOLDERS = frozenset(
    {
        "BudgetExhausted",
        "BudgetExceeded",
        "WaitingForUpstream",
        "ApprovalRequired",
        "TeamLimit",
        "WaitingForPreemptedVictims",
    }
)
"""Wait reasons that other requests' GPUs do not explain (a budget, inputs, an approval, the team's
own limit, victims still stopping): no holder list is added to them."""
MAX_NAMED = 3
"""Holders named in one reason; the rest are counted (`and 4 more`)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A request holding GPUs on a flavor. free_at=None: it declares no expected_duration.
    stopping: a preempted run that has not stopped yet (its GPUs are on their way back)."""

    request_id: str
    name: str
    lane: str
    owner: str
    gpus: int
    flavor: str
    free_at: datetime | None
    stopping: bool = False

    def text(self) -> str:
        when = (
            "stopping now"
            if self.stopping
            else f"expected free {_at(self.free_at)}"
            if self.free_at is not None
            else "no expected runtime"
        )
        return f"{self.name} ({self.lane}, {self.owner}, {self.gpus} GPUs, {when})"


@dataclass(frozen=True, slots=True)
class PreemptedBy:
    """The last preemption of a request that is pending again: by whom and when."""

    preemptor_id: str
    at: datetime
    preemptor: JobRequest | None = None


def _at(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def who(request_id: str, req: JobRequest | None) -> str:
    """`name (lane, owner)` of a request, or its id when the ledger no longer has it."""
    if req is None:
        return request_id
    return f"{req.name or request_id} ({req.lane}, {req.owner})"


def latest_checkpoint(path: Path) -> Path | None:
    """The newest `ckpt-*` file under `path` (by modification time, then name), or None."""
    if not path.is_dir():
        return None
    found = [p for p in path.rglob(CHECKPOINT_GLOB) if p.is_file()]
    if not found:
        return None
    return max(found, key=lambda p: (p.stat().st_mtime, p.name))


def holders(
    policy: Policy,
    states: Iterable[RequestState],
    holding: Mapping[str, str] | None = None,
    admitted_now: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> dict[str, list[Holder]]:
    """Admitted (and still-stopping) requests by the flavor they hold, soonest free first.

    admitted_now: requests admitted by this very tick -> flavor (they hold it from `now`)."""
    holding = holding or {}
    admitted_now = admitted_now or {}
    out: dict[str, list[Holder]] = {}
    for s in states:
        stopping = s.request_id in holding
        fresh = s.request_id in admitted_now
        if not stopping and not fresh and s.state not in ACTIVE_STATES:
            continue
        if stopping:
            flavor = holding.get(s.request_id)
        elif fresh:
            flavor = admitted_now[s.request_id]
        else:
            flavor = s.cluster_flavor or s.flavor
        if not flavor:
            continue
        req = s.request
        since = now if fresh and now is not None else s.updated_at
        free_at = since + req.expected_duration if req.expected_duration and not stopping else None
        out.setdefault(flavor, []).append(
            Holder(
                s.request_id,
                req.name or s.request_id,
                req.lane or "",
                req.owner or "",
                int(req.gpu_count or 0),
                flavor,
                free_at,
                stopping,
            )
        )
    far = datetime.max.replace(tzinfo=UTC)
    for hs in out.values():
        hs.sort(key=lambda h: (not h.stopping, h.free_at or far, -policy.lanes[h.lane].priority
                               if h.lane in policy.lanes else 0, h.request_id))
    return out


def holder_text(flavors: list[str], held: Mapping[str, list[Holder]], exclude: str) -> str:
    """`its GPUs on f1, f2 are held by A (...), B (...) and N more`, or "" when nothing holds them."""
    mine = [h for f in flavors for h in held.get(f, ()) if h.request_id != exclude]
    if not mine:
        return ""
    far = datetime.max.replace(tzinfo=UTC)
    mine.sort(key=lambda h: (not h.stopping, h.free_at or far, h.request_id))
    named = ", ".join(h.text() for h in mine[:MAX_NAMED])
    more = f" and {len(mine) - MAX_NAMED} more" if len(mine) > MAX_NAMED else ""
    return f"the GPUs it can use ({', '.join(flavors)}) are held by {named}{more}"


def resume_text(req: JobRequest, checkpoint: Path | None) -> str:
    """Where a preempted request will resume, from its preemption policy and its last checkpoint."""
    if req.preemption_policy == "checkpoint_requeue":
        if checkpoint is not None:
            return f"resumes from checkpoint {checkpoint.name}"
        return "resumes from its last checkpoint (none written yet: it starts over)"
    if req.preemption_policy == "fail":
        return "does not resume (preemption_policy fail)"
    return "restarts from the beginning (preemption_policy requeue)"


def preemption_text(victim: JobRequest, by: PreemptedBy, checkpoint: Path | None) -> str:
    """`preempted by NAME (lane, owner) at T; resumes from checkpoint ckpt-...`."""
    return f"preempted by {who(by.preemptor_id, by.preemptor)} at {_at(by.at)}; {resume_text(victim, checkpoint)}"


def name_blockers(
    policy: Policy,
    states: Iterable[RequestState],
    waits: Iterable[PendingInfo],
    *,
    holding: Mapping[str, str] | None = None,
    admitted_now: Mapping[str, str] | None = None,
    now: datetime | None = None,
    preempted: Mapping[str, PreemptedBy] | None = None,
    checkpoint_of: Callable[[str], Path | None] = lambda _rid: None,
) -> list[PendingInfo]:
    """The waits with their blockers named after the engine's message.

    admitted_now / now: this tick's admissions (request -> flavor), holders from now on;
    preempted: pending requests whose last state change came from a preemption (victim id ->
    PreemptedBy); checkpoint_of: a request's newest checkpoint file (None: none).
    """
    states = list(states)
    by_id = {s.request_id: s for s in states}
    held = holders(policy, states, holding, admitted_now, now)
    preempted = preempted or {}
    flavors_of: dict[tuple[str, str | None, str, str | None], tuple[str, ...]] = {}
    # the holders' text depends only on the flavors, unless the waiting request is one of the
    # holders itself (a victim still stopping): one text per flavor list, not one per wait
    texts: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {}
    fresh = admitted_now or {}
    out = []
    for w in waits:
        s = by_id.get(w.name)
        if s is None or s.state not in PENDING_STATES or w.name in fresh:
            out.append(w)
            continue
        req = s.request
        extra = []
        if w.name in preempted:
            extra.append(preemption_text(req, preempted[w.name], checkpoint_of(w.name)))
        if w.reason_code not in NOT_BLOCKED_BY_HOLDERS:
            key = (req.lane or "", req.gpu_type, req.gpu_resource or GPU, req.site)
            flavors = flavors_of.get(key)
            if flavors is None:
                flavors = flavors_of[key] = tuple(matching_flavors(policy, *key))
            hit = texts.get(flavors)
            if hit is None:
                ids = frozenset(h.request_id for f in flavors for h in held.get(f, ()))
                hit = texts[flavors] = (holder_text(list(flavors), held, ""), ids)
            text, ids = hit
            if w.name in ids:
                text = holder_text(list(flavors), held, w.name)
            if text:
                extra.append(text)
        if extra:
            # `replace(w, message=...)`, spelled out: one per waiting request (50,000 on a long queue)
            w = PendingInfo(
                w.name, w.cq, w.reason_code, w.condition, "; ".join([w.message, *extra]), w.position, w.of,
                w.estimated_start, w.flavor, w.queue,
            )
        out.append(w)
    return out


def preemptions_of(ledger: Ledger, states: Iterable[RequestState]) -> dict[str, PreemptedBy]:
    """The last preemption of every pending request that has one (its preemptor from the ledger)."""
    # only a request preempted at least once has a `preempted` event to look up
    pending = [s.request_id for s in states if s.state in PENDING_STATES and s.preemptions]
    last = ledger.last_preemptions(pending)
    if not last:
        return {}
    requests = ledger.requests(sorted({by for by, _ in last.values()}))
    return {victim: PreemptedBy(by, at, requests.get(by)) for victim, (by, at) in last.items()}


TAG_PREEMPTED_BY = "gpu-platform/preempted-by"
TAG_PREEMPTED_BY_NAME = "gpu-platform/preempted-by-name"
TAG_RESUME_FROM = "gpu-platform/resume-from"
"""Tags the gate puts on a victim's run before it stops it: the preemptor's request id and name,
and the checkpoint file the next attempt resumes from (`start` when it starts over)."""


def victim_run_tags(preemptor_id: str, preemptor: JobRequest | None, checkpoint: Path | None) -> dict[str, str]:
    return {
        TAG_PREEMPTED_BY: preemptor_id,
        TAG_PREEMPTED_BY_NAME: (preemptor.name if preemptor is not None and preemptor.name else preemptor_id),
        TAG_RESUME_FROM: checkpoint.name if checkpoint is not None else "start",
    }


def victim_run_message(
    victim: JobRequest,
    attempt: int,
    preemptor_id: str,
    preemptor: JobRequest | None,
    kueue_reason: str,
    checkpoint: Path | None,
) -> str:
    """What a preempted run says about its end: by whom, why, and where the request resumes. Written
    as the run is stopped: a program that checkpoints on SIGTERM writes a newer one on its way out,
    and the next attempt resumes from the newest, so the message says so."""
    newer = (
        " (or from a newer checkpoint, if the run writes one as it stops)"
        if checkpoint is not None and victim.preemption_policy == "checkpoint_requeue"
        else ""
    )
    return (
        f"Preempted ({kueue_reason}) by {who(preemptor_id, preemptor)}, request {preemptor_id}: "
        f"this run is canceled, not failed. The request is requeued in its original place and "
        f"{resume_text(victim, checkpoint)} as attempt {attempt + 1}{newer}."
    )
