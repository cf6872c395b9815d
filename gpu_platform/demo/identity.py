"""Who acts in the demo: the local OS login, as the demo's own policy lets it.

The demo runs on one machine with no identity provider, and its example requests belong to the
example teams' people (ana@example.com, ...). `demo seed --project-config` therefore writes a
project config that names the OS login as the identity source (`identity: os_user`: the login of
the process's uid, not `$USER`) and the demo's own policy (`<home>/policy.yaml`): the packaged
default plus a roster role `demo-operator` whose only member is that login, with
`submit_for_others` (docs/approvals.md, Identity). So `gpu-platform submit examples/...` run
beside the config is recorded as submitted by the login on behalf of the file's owner, verified
by the OS; the policy keeps scale S4, where an unverified submitter is refused. The config's
policy applies only to the ledger the same config names (`project.deployed_policy_path`).

Budgets (`demo_budgets`): the demo's policy reserves per **day** (`budget_period: day`), each
lane's daily budget a tenth of its packaged monthly one, and never below the largest `max_cost`
of the packaged example requests of that lane (so every example still validates). The history
ends yesterday and its simulator does not model budgets, so under a monthly period the gate would
count the history's reservations: on the 1st of a month nothing, later in the month more than the
month's budget (the live sweep would never run). Per day, the gate's budget counts only today's
live requests, the same on every date: the research lane's $4,000 holds the sweep, its first
request and the README's and Launchpad's submissions, and the sweep's tuned run
(`examples/demo/research_tuned_h100.yaml`, max_cost $3,800) waits `BudgetExhausted` behind
them until someone grants a cost exception (`gpu-platform approve ID --kind cost`).
The seed itself records the example requests as the platform (no submitter) and plays each
incident's nominated approver (`gpu_platform.demo.incident.submit_incident`).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import yaml

from gpu_platform.policy import default_policy_path, parse_policy
from gpu_platform.requests.identity import os_login

POLICY_NAME = "policy.yaml"
ROLE = "demo-operator"
BUDGET_PERIOD = "day"
BUDGET_SHARE = Decimal(1) / 10
"""The demo's daily budget of a lane as a share of its packaged monthly budget."""


def _example_max_costs() -> dict[str, Decimal]:
    """The largest max_cost of the packaged example requests (any folder) per lane."""
    from gpu_platform.demo.instance import EXAMPLES

    most: dict[str, Decimal] = {}
    for path in sorted(EXAMPLES.parent.rglob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, dict) or not raw.get("lane") or raw.get("max_cost") is None:
            continue
        cost = Decimal(str(raw["max_cost"]))
        most[raw["lane"]] = max(cost, most.get(raw["lane"], cost))
    return most


def demo_budgets(raw: dict) -> dict[str, Decimal]:
    """Each lane's daily budget in the demo: BUDGET_SHARE of its monthly budget in `raw` (the
    packaged policy), at least the largest max_cost of the packaged examples of that lane."""
    most = _example_max_costs()
    out = {}
    for name, lane in raw.get("lanes", {}).items():
        if lane.get("budget") is None:
            continue
        daily = (Decimal(str(lane["budget"])) * BUDGET_SHARE).quantize(Decimal(1))
        out[name] = max(daily, most.get(name, daily))
    return out


def demo_policy_text(login: str | None = None) -> str:
    """The demo's policy: the packaged default with daily budgets (`demo_budgets`) and the
    `demo-operator` role for `login`."""
    raw = yaml.safe_load(default_policy_path().read_text())
    if raw.get("budget_period", "month") != "month":
        raise ValueError(f"the packaged policy's budget_period is {raw.get('budget_period')!r}: the demo's daily "
                         "budgets are derived from monthly ones")
    raw["budget_period"] = BUDGET_PERIOD
    for name, budget in demo_budgets(raw).items():
        raw["lanes"][name]["budget"] = int(budget) if budget == budget.to_integral_value() else float(budget)
    raw.setdefault("approvers", {})[ROLE] = {
        "description": "The local OS login running the demo: submits the example teams' requests on their behalf.",
        "may_approve": ["cost"],
        "members": [login or os_login()],
        "submit_for_others": True,
    }
    parse_policy(raw, "demo policy")  # the demo never writes a policy the platform refuses
    header = ("# written by `gpu-platform demo seed --project-config`: the packaged default policy with daily\n"
              "# budgets, plus the demo-operator role for the local login (gpu_platform/demo/identity.py)\n")
    return header + yaml.safe_dump(raw, sort_keys=False)


def write_demo_policy(home: Path) -> Path:
    """Write `<home>/policy.yaml` (rewritten when it differs); return its path."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / POLICY_NAME
    text = demo_policy_text()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
