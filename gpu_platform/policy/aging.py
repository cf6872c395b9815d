"""Aging: the priority boost a waiting workload has earned, from its lane's `targets`.

The one rule the simulator, the gate's engine and the gate's Kubernetes sync share. A workload
of a lane with `targets.wait_p95` and `targets.boost_after` gains `targets.boost` priority for
each full `boost_after x wait_p95` it has waited since its submission, capped at one below the
next higher lane's priority (a lane with no higher lane: `NO_HIGHER_LANE_CAP`). A lane without
those targets never boosts.

Kueue reads the boost from the Workload annotation `kueue.x-k8s.io/priority-boost` (KEP-7990,
feature gate `PriorityBoost`): a signed integer as a string, unset or unparsable = 0, and
effective priority = `spec.priority` + boost, used for queue order within a ClusterQueue and for
the priority comparisons of preemption. Kueue never sets it: an external controller does; here
the gate does (`gpu_platform.cluster.aging`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpu_platform.policy.model import Policy

PRIORITY_BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
"""The Workload annotation Kueue adds to the Workload's priority (KEP-7990)."""

NO_HIGHER_LANE_CAP = 1_000_000
"""The cap of the highest lane: nothing above it to stay below."""


@dataclass(frozen=True, slots=True)
class AgingRule:
    """A lane's aging: `per_step` priority for each `step_s` seconds waited, at most `cap`."""

    lane: str
    step_s: float
    per_step: int
    cap: int

    def level(self, waited_s: float) -> int:
        """Whole steps waited (0 before the first; a negative wait, a clock skew, is 0)."""
        if waited_s <= 0 or self.step_s <= 0:
            return 0
        return int(math.floor(waited_s / self.step_s))

    def boost(self, waited_s: float) -> int:
        """The boost after `waited_s` seconds of waiting: min(level x per_step, cap)."""
        return min(self.level(waited_s) * self.per_step, self.cap)

    def next_step_s(self, waited_s: float) -> float | None:
        """Seconds of waiting at which the boost rises next; None once it is at its cap."""
        if self.boost(waited_s) >= self.cap or self.step_s <= 0:
            return None
        return (self.level(waited_s) + 1) * self.step_s

    def as_tuple(self) -> tuple[float, int, int]:
        """(step seconds, boost per step, cap): the simulator's `Scenario.boosts` entry."""
        return (self.step_s, self.per_step, self.cap)


_LAST: list = []
"""aging_rules' last answer: [policy, rules] (the same Policy object gives the same rules)."""


def aging_rules(policy: Policy) -> dict[str, AgingRule]:
    """Lane name -> its aging rule, for the lanes that age (those with `targets.wait_p95` and
    `targets.boost_after`, and room below the next higher lane)."""
    if _LAST and _LAST[0] is policy:
        return _LAST[1]
    lanes = policy.lanes_by_priority()
    out: dict[str, AgingRule] = {}
    for lane in lanes:
        t = lane.targets
        if t is None or t.wait_p95 is None or t.boost_after is None:
            continue
        above = [x.priority for x in lanes if x.priority > lane.priority]
        cap = (min(above) - lane.priority - 1) if above else NO_HIGHER_LANE_CAP
        if cap > 0:
            out[lane.name] = AgingRule(lane.name, t.wait_p95.total_seconds() * t.boost_after, t.boost, cap)
    _LAST[:] = [policy, out]
    return out


def _seconds(t: datetime | float) -> float:
    return t.timestamp() if isinstance(t, datetime) else float(t)


def priority_boost(policy: Policy, lane: str, submitted_at: datetime | float, now: datetime | float) -> int:
    """The boost of a workload of `lane` submitted at `submitted_at` and still waiting at `now`
    (datetimes, or epoch seconds); 0 for a lane that does not age."""
    rule = aging_rules(policy).get(lane)
    return 0 if rule is None else rule.boost(_seconds(now) - _seconds(submitted_at))


@dataclass(frozen=True, slots=True)
class BoostNow:
    """Where a waiting workload stands on its lane's aging at one instant.

    boost: what it has now; next_boost / next_at: the boost it gets next and when (None: at its
    cap, no further step); rule: the lane's rule."""

    boost: int
    next_boost: int | None
    next_at: datetime | None
    rule: AgingRule

    def text(self, admitted: bool = False) -> str:
        """One line; `admitted`: the boost an admitted workload keeps (no next step)."""
        step = timedelta(seconds=self.rule.step_s)
        head = (f"priority boost +{self.boost} (+{self.rule.per_step} per {step} waited, at most "
                f"+{self.rule.cap}; Kueue annotation {PRIORITY_BOOST_ANNOTATION})")
        if admitted:
            return head + "; kept since admission (only waiting work ages)"
        if self.next_at is None:
            return head + "; at its cap"
        return head + f"; next +{self.next_boost} at {self.next_at.isoformat(timespec='seconds')}"


def boost_now(policy: Policy, lane: str, submitted_at: datetime, now: datetime) -> BoostNow | None:
    """The boost of a workload waiting at `now` and its next step; None for a lane that does not age."""
    rule = aging_rules(policy).get(lane)
    if rule is None:
        return None
    waited = (now - submitted_at).total_seconds()
    nxt = rule.next_step_s(waited)
    return BoostNow(
        boost=rule.boost(waited),
        next_boost=None if nxt is None else rule.boost(nxt),
        next_at=None if nxt is None else submitted_at + timedelta(seconds=nxt),
        rule=rule,
    )


def parse_boost(value: object, where: str) -> int:
    """An annotation value as Kueue's signed integer; ValueError naming `where` otherwise (Kueue
    itself reads an unparsable value as 0: the platform's own inputs fail closed instead)."""
    text = str(value).strip()
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not an integer priority boost") from None
