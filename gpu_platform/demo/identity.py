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
The seed itself records the example requests as the platform (no submitter) and plays each
incident's nominated approver (`gpu_platform.demo.incident.submit_incident`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_platform.policy import default_policy_path, parse_policy
from gpu_platform.requests.identity import os_login

POLICY_NAME = "policy.yaml"
ROLE = "demo-operator"


def demo_policy_text(login: str | None = None) -> str:
    """The demo's policy: the packaged default and the `demo-operator` role for `login`."""
    raw = yaml.safe_load(default_policy_path().read_text())
    raw.setdefault("approvers", {})[ROLE] = {
        "description": "The local OS login running the demo: submits the example teams' requests on their behalf.",
        "may_approve": ["cost"],
        "members": [login or os_login()],
        "submit_for_others": True,
    }
    parse_policy(raw, "demo policy")  # the demo never writes a policy the platform refuses
    header = ("# written by `gpu-platform demo seed --project-config`: the packaged default policy plus the\n"
              "# demo-operator role for the local login (gpu_platform/demo/identity.py)\n")
    return header + yaml.safe_dump(raw, sort_keys=False)


def write_demo_policy(home: Path) -> Path:
    """Write `<home>/policy.yaml` (rewritten when it differs); return its path."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / POLICY_NAME
    text = demo_policy_text()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
