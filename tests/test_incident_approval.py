"""Grants come from the roster (issue 24, class 5): the incident lane admits a request only when
its approver is a member of a roster role that may approve `incident`, or such a member granted
it with `gpu-platform approve --kind incident`; who approves is the verified identity when the
deployment provides one (`GPU_PLATFORM_IDENTITY`, an OIDC header, the Dagster user)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.gate.tick import plan_tick, record_plan
from gpu_platform.policy import default_policy_path, load_policy, parse_policy
from gpu_platform.requests.approvals import ApprovalError, approver_for
from gpu_platform.requests.identity import Identity, IdentityError, current_identity
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.conftest import EXAMPLES

ROSTER = "(roles: platform-lead, safety-owner)"
pytestmark = pytest.mark.real_identity


def _incident(ledger: Ledger, approver: str, **update) -> str:
    raw = yaml.safe_load((EXAMPLES / "incident_response.yaml").read_text())
    raw.update(approver=approver, **update)
    return ledger.submit(validate_request(raw, load_policy()))


def _approve(url: str, rid: str, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["approve", rid, *args, "--ledger", url], env=env or {}, catch_exceptions=False)


@pytest.fixture
def ledger(sqlite_url) -> Ledger:
    return Ledger(sqlite_url)


def test_an_incident_whose_approver_is_not_on_the_roster_waits_naming_approver_and_roles(ledger: Ledger, sqlite_url):
    rid = _incident(ledger, "mallory@example.com")
    now = datetime.now(UTC)
    plan = plan_tick(load_policy(), ledger.states(), now)
    assert plan.launches == []
    (wait,) = plan.waits
    assert wait.name == rid and wait.reason_code == "ApprovalRequired"
    assert wait.message.startswith("ApprovalRequired: lane incident_response requires approval (incident): ")
    assert "approver 'mallory@example.com' is not a member of a roster role that may approve incident" in wait.message
    assert ROSTER in wait.message and f"gpu-platform approve {rid} --kind incident" in wait.message
    # recorded as a wait, visible in `queue` and `explain` with the reason and the rule
    record_plan(ledger, plan, ledger.states())
    assert ledger.state(rid).state == "waiting" and "mallory@example.com" in ledger.state(rid).reason
    out = CliRunner().invoke(main, ["queue", "--ledger", sqlite_url, "--format", "json"], catch_exceptions=False)
    (row,) = [r for r in json.loads(out.output) if r["request_id"] == rid]
    assert "ApprovalRequired" in row["reason"] and "mallory@example.com" in row["reason"]
    ex = CliRunner().invoke(main, ["explain", rid, "--ledger", sqlite_url, "--format", "json"], catch_exceptions=False)
    step = json.loads(ex.output)["steps"][-1]
    assert step["event"] == "waiting" and "mallory@example.com" in step["reason"]
    assert "lanes.incident_response.requires_approval = incident" in step["rule"]
    assert "approvers.platform-lead, approvers.safety-owner" in step["rule"]


def test_a_policy_without_requires_approval_admits_as_before(ledger: Ledger):
    raw = yaml.safe_load(default_policy_path().read_text())
    del raw["lanes"]["incident_response"]["requires_approval"]
    pol = parse_policy(raw)
    rid = _incident(ledger, "mallory@example.com")
    assert [la.request_id for la in plan_tick(pol, ledger.states(), datetime.now(UTC)).launches] == [rid]


K8S = {"GPU_PLATFORM_IDENTITY": "kubernetes"}


def _as(monkeypatch, who: str) -> dict[str, str]:
    """The environment of a caller the API server knows as `who` (SelfSubjectReview)."""
    monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", lambda: who)
    return K8S


def test_a_named_approver_admits_nothing_until_they_approve(ledger: Ledger, sqlite_url, monkeypatch):
    rid = _incident(ledger, "release-safety-lead@example.com")
    plan = plan_tick(load_policy(), ledger.states(), datetime.now(UTC))
    assert plan.launches == []
    (wait,) = plan.waits
    assert wait.reason_code == "ApprovalRequired"
    assert "waiting for 'release-safety-lead@example.com' (nominated approver)" in wait.message
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "sev1",
                   env=_as(monkeypatch, "release-safety-lead@example.com"))
    assert out.exit_code == 0, out.output
    plan = plan_tick(load_policy(), ledger.states(), datetime.now(UTC))
    assert [la.request_id for la in plan.launches] == [rid]


def test_self_approval_is_refused(ledger: Ledger, sqlite_url, monkeypatch):
    # the owner is a roster member, and so is the one who submitted it: neither approves it
    rid = _incident(ledger, "release-safety-lead@example.com", owner="safety-owner@example.com")
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "mine",
                   env=_as(monkeypatch, "safety-owner@example.com"))
    assert out.exit_code == 2 and "owns this request; nobody approves their own" in out.output
    submitted = ledger.submissions(
        [validate_request({**yaml.safe_load((EXAMPLES / "incident_response.yaml").read_text()),
                           "incident_id": "INC-9"}, load_policy())],
        identity=Identity("platform-lead@example.com", "kubernetes", True), policy=load_policy(),
    )
    rid2 = submitted[0].request_id
    out = _approve(sqlite_url, rid2, "--role", "platform-lead", "--kind", "incident", "--reason", "mine",
                   env=_as(monkeypatch, "platform-lead@example.com"))
    assert out.exit_code == 2 and "submitted this request; nobody approves their own" in out.output
    assert [e.event for e in ledger.events(rid)] == ["submitted"]
    assert [e.event for e in ledger.events(rid2)] == ["submitted"]
    # an approval the ledger holds by the owner (written around `approve`) admits nothing either
    ledger.record(rid, "approved", "x", details={"kind": "incident", "role": "safety-owner", "verified": True,
                                                 "approver": "safety-owner@example.com", "identity_source": "oidc"})
    assert plan_tick(load_policy(), ledger.states(), datetime.now(UTC)).launches == []
    # the roster's second approver for break-glass may grant it
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "sev1",
                   env=_as(monkeypatch, "sre-oncall@example.com"))
    assert out.exit_code == 0, out.output
    assert rid in [la.request_id for la in plan_tick(load_policy(), ledger.states(), datetime.now(UTC)).launches]


def test_a_49_hour_old_break_glass_grant_admits_nothing_and_opens_a_retrospective(ledger: Ledger, sqlite_url,
                                                                                 monkeypatch):
    from datetime import timedelta

    rid = _incident(ledger, "release-safety-lead@example.com")
    then = datetime.now(UTC) - timedelta(hours=49)
    ledger.record(rid, "approved", "incident approval", at=then, details={
        "kind": "incident", "role": "safety-owner", "approver": "release-safety-lead@example.com", "reason": "sev1",
        "identity_source": "kubernetes", "verified": True})
    plan = plan_tick(load_policy(), ledger.states(), datetime.now(UTC))
    assert plan.launches == []
    (wait,) = plan.waits
    assert "expired" in wait.message and "approvals.ttl incident: 2 days" in wait.message
    # one hour in, the same grant admits
    assert [la.request_id for la in plan_tick(load_policy(), ledger.states(), then + timedelta(hours=1)).launches] == [rid]
    out = _approve(sqlite_url, "--due", "--format", "json", env={})
    assert out.exit_code == 0, out.output
    (item,) = json.loads(out.output)
    assert (item["request_id"], item["why"], item["approver"]) == (rid, "expired", "release-safety-lead@example.com")
    # the same item on /metrics
    from gpu_platform.observe.metrics.collector import registry_for

    labels = {"team": "safety", "kind": "incident", "why": "expired"}
    metric = "gpu_platform_break_glass_retrospectives_due"
    assert registry_for(ledger, load_policy()).get_sample_value(metric, labels) == 1
    out = _approve(sqlite_url, rid, "--done", "--reason", "reviewed in INC-4 postmortem",
                   env=_as(monkeypatch, "platform-lead@example.com"))
    assert out.exit_code == 0, out.output
    assert json.loads(_approve(sqlite_url, "--due", "--format", "json", env={}).output) == []
    assert registry_for(ledger, load_policy()).get_sample_value(metric, labels) is None


def test_approve_ignores_a_planted_policy_roster(ledger: Ledger, sqlite_url, monkeypatch, tmp_path: Path):
    rid = _incident(ledger, "release-safety-lead@example.com")
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["approvers"]["safety-owner"]["members"].append("mallory@example.com")
    planted = tmp_path / "gpu-platform.yaml"
    (tmp_path / "evil.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    planted.write_text("policy: evil.yaml\n")
    monkeypatch.chdir(tmp_path)
    env = {**_as(monkeypatch, "mallory@example.com"), "GPU_PLATFORM_CONFIG": str(planted)}
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "let me in", env=env)
    assert out.exit_code == 2 and "'mallory@example.com' is not a member of role safety-owner" in out.output
    out = CliRunner().invoke(main, ["approve", rid, "--role", "safety-owner", "--kind", "incident", "--reason", "x",
                                    "--ledger", sqlite_url, "--policy", str(tmp_path / "evil.yaml")], env=env)
    assert out.exit_code == 2  # no --policy: approve reads the deployed roster only
    assert [e.event for e in ledger.events(rid)] == ["submitted"]


def test_the_example_and_demo_incidents_are_admitted():
    pol = load_policy()
    for path in (EXAMPLES / "incident_response.yaml", EXAMPLES.parent / "demo" / "incident_sev1.yaml"):
        raw = yaml.safe_load(path.read_text())
        assert any(raw["approver"] in pol.approvers[r].members for r in ("safety-owner", "platform-lead")), path


def test_a_roster_member_admits_a_waiting_incident_with_approve_kind_incident(ledger: Ledger, sqlite_url, monkeypatch):
    rid = _incident(ledger, "mallory@example.com")
    # a self-declared --approver with no identity source is a claim: refused
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "sev1 INC-4",
                   "--approver", "safety-owner@example.com")
    assert out.exit_code == 2 and "no identity source is configured" in out.output
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "sev1 INC-4",
                   env=_as(monkeypatch, "safety-owner@example.com"))
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["identity_source"] == "kubernetes"
    plan = plan_tick(load_policy(), ledger.states(), datetime.now(UTC))
    assert [la.request_id for la in plan.launches] == [rid]


def test_approve_by_a_non_member_is_refused(ledger: Ledger, sqlite_url, monkeypatch):
    rid = _incident(ledger, "mallory@example.com")
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "let me in",
                   env=_as(monkeypatch, "mallory@example.com"))
    assert out.exit_code == 2
    assert "'mallory@example.com' is not a member of role safety-owner" in out.output
    out = _approve(sqlite_url, rid, "--role", "finops", "--kind", "incident", "--reason", "x",
                   env=_as(monkeypatch, "finops-lead@example.com"))
    assert out.exit_code == 2 and "role finops may not approve incident" in out.output
    assert [e.event for e in ledger.events(rid)] == ["submitted"]
    assert plan_tick(load_policy(), ledger.states(), datetime.now(UTC)).launches == []


def test_with_a_verified_identity_a_different_approver_is_refused(ledger: Ledger, sqlite_url, monkeypatch):
    rid = _incident(ledger, "mallory@example.com")
    monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", lambda: "mallory@example.com")
    env = {"GPU_PLATFORM_IDENTITY": "kubernetes", "USER": "safety-owner@example.com"}
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "x",
                   "--approver", "safety-owner@example.com", env=env)
    assert out.exit_code == 2
    assert ("--approver: 'safety-owner@example.com' is not who you are: the verified identity is "
            "'mallory@example.com' (from kubernetes)") in out.output
    # without --approver the verified identity is the approver, and the roster still decides
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "x", env=env)
    assert out.exit_code == 2 and "'mallory@example.com' is not a member of role safety-owner" in out.output
    assert [e.event for e in ledger.events(rid)] == ["submitted"]
    # a roster member verified by the API server approves; the ledger says where the name came from
    monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", lambda: "safety-owner@example.com")
    out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "sev1", env=env)
    assert out.exit_code == 0, out.output
    (ev,) = [e for e in ledger.events(rid) if e.event == "approved"]
    assert ev.details == {"kind": "incident", "role": "safety-owner", "approver": "safety-owner@example.com",
                          "reason": "sev1", "identity_source": "kubernetes", "verified": True}


def test_a_required_identity_source_with_no_answer_refuses_instead_of_using_user(ledger: Ledger, sqlite_url, monkeypatch):
    rid = _incident(ledger, "mallory@example.com")

    def unreachable() -> str:
        raise ConnectionError("connection refused")

    monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", unreachable)
    for mode, why in (("kubernetes", "the API server did not say who this is (connection refused)"),
                      ("oidc", "no verified identity was passed"), ("ldap", "not an identity source")):
        out = _approve(sqlite_url, rid, "--role", "safety-owner", "--kind", "incident", "--reason", "x",
                       env={"GPU_PLATFORM_IDENTITY": mode, "USER": "safety-owner@example.com"})
        assert out.exit_code == 2 and why in out.output, (mode, out.output)
    assert [e.event for e in ledger.events(rid)] == ["submitted"]


def test_current_identity_prefers_a_verified_source_over_user():
    env = {"USER": "someone"}
    assert current_identity(env) == Identity("someone", "os_user")
    headers = {"x-forwarded-user": "alice", "X-Auth-Request-Email": "alice@example.com"}
    assert current_identity(env, headers=headers) == Identity("alice@example.com", "oidc")
    assert current_identity(env, dagster_user="bob@example.com") == Identity("bob@example.com", "dagster")
    assert current_identity(env, headers=headers, dagster_user="bob@example.com").source == "oidc"
    k8s = {**env, "GPU_PLATFORM_IDENTITY": "kubernetes"}
    assert current_identity(k8s, kubernetes_user=lambda: "carol") == Identity("carol", "kubernetes", True)
    assert current_identity({**env, "GPU_PLATFORM_IDENTITY": "dagster"}, headers=headers, dagster_user="bob").source == "dagster"
    with pytest.raises(IdentityError, match="cannot ask the API server"):
        current_identity(k8s)
    with pytest.raises(IdentityError, match="refusing to use \\$USER"):
        current_identity({**env, "GPU_PLATFORM_IDENTITY": "dagster"})
    assert current_identity({**env, "GPU_PLATFORM_IDENTITY": "os_user"}, headers=headers).source == "os_user"
    # a verified identity decides who approves; without one, --approver is self-declared
    assert approver_for(None, Identity("alice", "oidc")) == "alice"
    assert approver_for("alice", Identity("alice", "oidc")) == "alice"
    with pytest.raises(ApprovalError, match="is not who you are"):
        approver_for("bob", Identity("alice", "oidc"))
    with pytest.raises(ApprovalError, match="no identity source is configured"):
        approver_for("bob", Identity("someone", "os_user"))
    # GPU_PLATFORM_IDENTITY=os_user: the OS login, not $USER (which anyone sets)
    import os
    import pwd
    mine = current_identity({"USER": "platform-lead@example.com", "GPU_PLATFORM_IDENTITY": "os_user"})
    assert mine == Identity(pwd.getpwuid(os.geteuid()).pw_name, "os_user", True) and mine.verified


def test_policy_check_refuses_a_lane_no_role_may_approve(tmp_path: Path):
    raw = yaml.safe_load(default_policy_path().read_text())
    for role in raw["approvers"].values():
        role["may_approve"] = [k for k in role["may_approve"] if k != "incident"] or ["cost"]
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = CliRunner().invoke(main, ["policy", "check", str(path)])
    assert out.exit_code == 2
    assert "lanes.incident_response.requires_approval: no role of the approvers: roster may approve incident" in out.output


class _WhoAmI(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/apis/authentication.k8s.io/v1/selfsubjectreviews":
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                           "status": {"userInfo": {"username": "oidc:dana@example.com", "groups": ["sre"]}}}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_whoami_asks_the_api_server_with_a_self_subject_review(tmp_path: Path):
    from gpu_platform.cluster.client import whoami

    server = HTTPServer(("127.0.0.1", 0), _WhoAmI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        }))
        assert whoami(kubeconfig) == "oidc:dana@example.com"
    finally:
        server.shutdown()
