"""Bound identity at submit (issue 42, class 1): the verified caller is recorded as the submitter,
and an owner, team or cost center the caller may not act for is refused; without an identity
source the request is marked unverified (below S4) or refused (from S4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import default_policy_path
from gpu_platform.requests.ledger import Ledger
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.real_identity

RESEARCH = EXAMPLES / "research_best_effort.yaml"  # owner ana@example.com, team perception


def _submit(url: str, path: Path, env: dict[str, str], monkeypatch=None, who: str | None = None, *args: str):
    if who is not None:
        monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", lambda: who)
    return CliRunner().invoke(main, ["submit", str(path), "--ledger", url, *args], env=env)


def _spoof(tmp_path: Path, **update) -> Path:
    raw = yaml.safe_load(RESEARCH.read_text())
    raw.update(update)
    path = tmp_path / "spoof.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


K8S = {"GPU_PLATFORM_IDENTITY": "kubernetes", "GPU_PLATFORM_POLICY": ""}


def test_a_spoofed_owner_or_team_is_refused_with_a_verified_identity(sqlite_url, tmp_path, monkeypatch):
    spoof = _spoof(tmp_path, owner="platform-lead@example.com")
    out = _submit(sqlite_url, spoof, K8S, monkeypatch, "mallory@example.com")
    assert out.exit_code == 2, out.output
    assert "owner: 'platform-lead@example.com' is not you ('mallory@example.com', from kubernetes)" in out.output
    assert "team: 'mallory@example.com' is not a member of team perception" in out.output
    assert "nothing was recorded" in out.output
    # ben (planning) claims perception's team and cost center under his own name
    out = _submit(sqlite_url, _spoof(tmp_path, owner="ben@example.com"), K8S, monkeypatch, "ben@example.com")
    assert out.exit_code == 2 and "'ben@example.com' is not a member of team perception" in out.output
    assert Ledger(sqlite_url).count()[0] == 0


def test_the_verified_owner_is_recorded_as_the_submitter(sqlite_url, monkeypatch):
    out = _submit(sqlite_url, RESEARCH, K8S, monkeypatch, "ana@example.com")
    assert out.exit_code == 0, out.output
    rid = next(line for line in out.output.splitlines() if line.startswith("req-"))
    ledger = Ledger(sqlite_url)
    assert ledger.submitter(rid) == {"submitted_by": "ana@example.com", "identity_source": "kubernetes",
                                     "verified": True}
    ex = CliRunner().invoke(main, ["explain", rid, "--ledger", sqlite_url, "--format", "json"])
    assert "submitted by ana@example.com (kubernetes)" in ex.output


def test_a_roster_role_submits_on_behalf_recorded_as_such(sqlite_url, monkeypatch):
    out = _submit(sqlite_url, RESEARCH, K8S, monkeypatch, "platform-lead@example.com")
    assert out.exit_code == 0, out.output
    rid = next(line for line in out.output.splitlines() if line.startswith("req-"))
    assert Ledger(sqlite_url).submitter(rid)["on_behalf_of"] == "ana@example.com"


def test_kubernetes_identity_with_no_cluster_fails_closed(sqlite_url, monkeypatch):
    def unreachable() -> str:
        raise ConnectionError("connection refused")

    monkeypatch.setattr("gpu_platform.cli.approve._kubernetes_user", unreachable)
    out = CliRunner().invoke(main, ["submit", str(_spoof_path()), "--ledger", sqlite_url], env=K8S)
    assert out.exit_code == 2 and "the API server did not say who this is" in out.output
    assert Ledger(sqlite_url).count()[0] == 0


def _spoof_path() -> Path:
    return RESEARCH


def test_without_an_identity_source_unverified_below_s4_and_refused_from_s4(sqlite_url, tmp_path):
    env = {"GPU_PLATFORM_IDENTITY": "", "USER": "platform-lead@example.com", "GPU_PLATFORM_POLICY": ""}
    out = CliRunner().invoke(main, ["submit", str(RESEARCH), "--ledger", sqlite_url], env=env)
    assert out.exit_code == 2 and "no identity source is configured" in out.output and "S4" in out.output
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["scale"] = "S3"
    s3 = tmp_path / "s3.yaml"
    s3.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = CliRunner().invoke(main, ["submit", str(RESEARCH), "--ledger", sqlite_url],
                             env={**env, "GPU_PLATFORM_POLICY": str(s3)})
    assert out.exit_code == 0, out.output
    rid = next(line for line in out.output.splitlines() if line.startswith("req-"))
    details = Ledger(sqlite_url).submitter(rid)
    assert details["verified"] is False and details["submitted_by"] == "platform-lead@example.com"
    ex = CliRunner().invoke(main, ["explain", rid, "--ledger", sqlite_url, "--format", "json"])
    assert "unverified" in json.dumps(json.loads(ex.output))
    env_s3 = {**env, "GPU_PLATFORM_POLICY": str(s3)}
    q = CliRunner().invoke(main, ["queue", "--ledger", sqlite_url, "--format", "json"], env=env_s3)
    (row,) = [r for r in json.loads(q.output) if r["request_id"] == rid]
    assert row["unverified"] is True
    q = CliRunner().invoke(main, ["queue", "--ledger", sqlite_url], env={**env_s3, "COLUMNS": "250"})
    assert "(unverified)" in q.output
