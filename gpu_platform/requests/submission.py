"""Request ids, the one resubmission rule, and who submitted.

A request's id is random (`new_request_id`) or its content's (`content_request_id`); a run of a
request asked for again gets the next run id (`run_request_id`); `decide_submission` is the one
rule for a request whose content was seen before (live: the same id; ended: refused unless asked
again, then the next run; docs/requests.md). `check_submitter` checks the submitter a request
names against the verified identity and the policy. The errors a refused batch raises
(`BatchConflict`, `RequestEnded`, `SubmitterRefused`) say what conflicted, request by request.

May import `requests/model.py`, `requests/events.py`, `policy/` (the scale rules).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gpu_platform.requests.events import TERMINAL_STATES
from gpu_platform.requests.model import FIELD_MAX_CHARS, JobRequest


class LedgerError(RuntimeError):
    """A ledger operation that cannot be carried out (unknown request, conflicting resubmission)."""


class BatchConflict(LedgerError):
    """A batch refused as a whole: `conflicts` lists (source, problem) for each conflicting request."""

    def __init__(self, conflicts: list[tuple[str, str]]):
        self.conflicts = conflicts
        super().__init__("; ".join(f"{src}: {msg}" for src, msg in conflicts))


class RequestEnded(BatchConflict):
    """A batch refused as a whole because a request's content is that of a request that already
    ended and `again` was not asked: `ended` lists (source, Submission) for each, the Submission
    naming the ended request, its state and when it ended (`ended_line` says it in words)."""

    def __init__(self, ended: list[tuple[str, Submission]]):
        self.ended = ended
        super().__init__([(src, ended_line(sub)) for src, sub in ended])


def new_request_id() -> str:
    return f"req-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:10]}"


def content_request_id(request: JobRequest) -> str:
    """The idempotency key of a request without `request_id`: `req-` + 20 hex characters of the
    SHA-256 of its validated content (canonical JSON). The same file submitted again (a re-run
    batch) is the same request; any change of content is a new one. The `name` is left out: a
    renamed file is the same request (it keeps the name it was first recorded with)."""
    content = json.loads(request.to_json())
    content.pop("name", None)
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "req-" + hashlib.sha256(canonical.encode()).hexdigest()[:20]


def same_job(a: JobRequest, b: JobRequest) -> bool:
    """Equal but for the `name` (a label, not part of what the job does)."""
    return a.model_copy(update={"name": None}) == b.model_copy(update={"name": None})


Outcome = Literal["recorded", "live", "ended", "conflict"]


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """The latest recorded run of a request id (`run_request_id(base, run)`): its stored content,
    its current state (None: no state row yet, taken as live) and since when it is in it."""

    request_id: str
    run: int
    payload: str
    state: str | None
    since: datetime | None


@dataclass(frozen=True, slots=True)
class Submission:
    """What submitting one request does (`decide_submission`).

    outcome: `recorded`: a new request under `request_id` (`again_of`: the ended run it repeats,
    else None); `live`: the same content is recorded under `request_id` and has not ended
    (`state`, `since`): nothing is written; `ended`: the same content is recorded under
    `request_id` and ended (`state`: finished, failed or rejected; `since`: when), and `again`
    was not asked: nothing is written; `conflict`: `request_id` is recorded with other content
    (`problem` says so)."""

    request_id: str
    outcome: Outcome
    state: str | None = None
    since: datetime | None = None
    again_of: str | None = None
    problem: str = ""


def run_request_id(base: str, run: int) -> str:
    """The id the `run`-th recording of the same request gets: `base` for the first,
    `<base>-run<run>` after (cut to fit the id's 200 characters)."""
    if run <= 1:
        return base
    suffix = f"-run{run}"
    return base[: FIELD_MAX_CHARS["request_id"] - len(suffix)] + suffix


def decide_submission(request: JobRequest, latest: RecordedRun | None, again: bool = False) -> Submission:
    """The idempotency rule, in one place (the CLI, the Launchpad and the API all come through
    `Ledger.submissions`): `request` (its `request_id` set: given, or content-derived) against
    the latest recorded run of that id (None: never recorded).

    - never recorded: recorded under its id;
    - recorded with other content (its `name` aside): a conflict;
    - recorded and live (any state but finished, failed, rejected): the same request, whatever
      `again` says, so a retried batch never records a live request twice;
    - recorded and ended: not silently swallowed: `ended` (nothing recorded) unless `again`,
      then recorded as the next run (`run_request_id`), which a retry of the same `again`
      finds live and answers with the same id."""
    base = request.request_id or ""
    if latest is None:
        return Submission(base, "recorded")
    stored = JobRequest.from_json(latest.payload)
    if not same_job(stored, request.model_copy(update={"request_id": stored.request_id})):
        return Submission(
            latest.request_id, "conflict", problem=f"request_id {latest.request_id!r} already exists with different content"
        )
    if latest.state not in TERMINAL_STATES:
        return Submission(latest.request_id, "live", latest.state, latest.since)
    if not again:
        return Submission(latest.request_id, "ended", latest.state, latest.since)
    return Submission(run_request_id(base, latest.run + 1), "recorded", again_of=latest.request_id)


UNVERIFIED_MARK = "unverified"
"""How a request whose submitter no identity source vouched for is marked (queue, explain, ledger)."""


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who records a request (`check_submitter`): `name` from `source` (`Identity.source`);
    `verified`: an identity source vouched for it; `on_behalf_of`: the owner, when a roster role
    with `submit_for_others` submits for someone else (else None)."""

    name: str
    source: str
    verified: bool
    on_behalf_of: str | None = None

    def details(self) -> dict[str, Any]:
        """The `submitted` event's details."""
        out: dict[str, Any] = {"submitted_by": self.name, "identity_source": self.source, "verified": self.verified}
        if self.on_behalf_of:
            out["on_behalf_of"] = self.on_behalf_of
        return out


def submitter_line(details: Mapping[str, Any] | None) -> str:
    """`submitted by ana@example.com (oidc)`, `... on behalf of ...`, or `... (unverified: ...)`;
    "" for a request recorded before submitters were (or by the platform itself)."""
    if not details or "submitted_by" not in details:
        return ""
    who = f"submitted by {details['submitted_by']}"
    if not details.get("verified"):
        who += f" ({UNVERIFIED_MARK}: no identity source is configured)"
    else:
        who += f" ({details.get('identity_source')})"
    if details.get("on_behalf_of"):
        who += f" on behalf of {details['on_behalf_of']}"
    return who


def check_submitter(request: JobRequest, identity: Any, policy: Any) -> tuple[Submitter | None, list[str]]:
    """Who may record `request`, beside the idempotency rule (`decide_submission`): the caller's
    `Identity` against the deployed policy (`teams.<t>.members`, the roster's
    `submit_for_others`, `scale`). Returns (the submitter, []) or (None, every problem).

    - no identity source configured (an unverified `$USER`): allowed below scale S4, recorded
      and shown as unverified; refused from S4 (the scale ladder fails closed there);
    - verified: the caller must be the request's `owner` and a member of its `team` (whose
      cost center the policy fixes), unless a roster role with `submit_for_others` lists them
      (recorded as on behalf of the owner)."""
    from gpu_platform.policy.scale import fails_closed

    if not identity.verified:
        if fails_closed(policy.scale):
            return None, [
                f"submitter: no identity source is configured (GPU_PLATFORM_IDENTITY: oidc, dagster, kubernetes or "
                f"os_user) and the policy's scale {policy.scale} fails closed; {identity.name!r} ($USER) vouches for "
                "nobody (docs/approvals.md, Identity)"
            ]
        return Submitter(identity.name, identity.source, False), []
    roles = [r for r, spec in policy.approvers.items() if spec.submit_for_others and identity.is_any_of(spec.members)]
    if roles:
        behalf = request.owner if request.owner != identity.name else None
        return Submitter(identity.name, identity.source, True, behalf), []
    errors = []
    if request.owner != identity.name:
        errors.append(
            f"owner: {request.owner!r} is not you ({identity.name!r}, from {identity.source}); submit as the owner, "
            "or ask a roster role with submit_for_others to submit on their behalf"
        )
    team = policy.teams.get(request.team or "")
    if team is not None and not identity.is_any_of(team.members):
        errors.append(
            f"team: {identity.name!r} is not a member of team {team.name} (teams.{team.name}.members), so may not "
            f"submit for it or bill its cost center {team.cost_center}"
        )
    if team is not None and request.cost_center != team.cost_center:
        errors.append(f"cost_center: {request.cost_center!r} is not team {team.name}'s ({team.cost_center})")
    if errors:
        return None, errors
    return Submitter(identity.name, identity.source, True), []


class SubmitterRefused(BatchConflict):
    """The caller may not record one of the batch's requests (`check_submitter`); nothing was recorded."""


def ended_line(sub: Submission) -> str:
    """`identical to req-..., which finished at 2026-05-01 12:00:03 UTC; nothing recorded`."""
    at = f" at {sub.since:%Y-%m-%d %H:%M:%S} UTC" if sub.since else ""
    return f"identical to {sub.request_id}, which {sub.state}{at}; nothing recorded"
