"""Admission checks read back: a Workload's `status.admissionChecks` (ProvisioningRequest,
MultiKueue) become ledger `cluster` events, once per change, and `explain` shows each check's
state with the policy lines it comes from.

The Workload is the recorded platform_maintenance one of tests/fixtures/kueue-workloads/ (admitted
on a100-spot), put back to quota reserved with its checks as Kueue v1beta2 writes them
(kubernetes-sigs/kueue @ ff69552e, Apache-2.0: `status.admissionChecks[]` name / state /
lastTransitionTime / message; the Admitted=False `UnsatisfiedChecks` condition of
pkg/workload/admissionchecks.go; the ProvisioningRequest messages of
pkg/controller/admissionchecks/provisioning; MultiKueue's `status.clusterName`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_platform.admission.kueue_checks import PROVISIONING_CHECK
from gpu_platform.cli import main
from gpu_platform.cluster.readback import ledger_rows, observe
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from tests.k8s.fake_apiserver import recorded, submit_recorded

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "examples" / "kueue-native"
RID = "req-20261201-3c4d5e6f70"


def _workload(checks: list[dict], cluster_name: str | None = None) -> dict:
    (wl,) = copy.deepcopy(recorded("workloads", "team-platform"))
    status = wl["status"]
    ready = all(c["state"] == "Ready" for c in checks)
    for c in status["conditions"]:
        if c["type"] == "Admitted" and not ready:
            c.update(status="False", reason="UnsatisfiedChecks", message="The workload has not all checks ready")
    status["admissionChecks"] = checks
    if cluster_name:
        status["clusterName"] = cluster_name
    return wl


def _check(state: str, message: str, at: str, **extra) -> dict:
    return {"name": PROVISIONING_CHECK, "state": state, "message": message, "lastTransitionTime": at, **extra}


def _observe(wl: dict):
    (obs,) = observe(recorded("jobs", "team-platform"), [wl])
    return obs


@pytest.fixture
def ledger(tmp_path: Path, policy) -> Ledger:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    submit_recorded(led, policy)
    return led


def test_each_check_state_is_recorded_once_per_change(ledger: Ledger) -> None:
    pending = _observe(_workload([_check("Pending", "Provisioning Request was successfully queued.", "2026-12-01T10:00:05Z")]))
    assert pending.condition == "QuotaReserved"
    assert pending.admission_checks == (
        {"name": PROVISIONING_CHECK, "state": "Pending", "message": "Provisioning Request was successfully queued."},
    )
    assert f"admission check {PROVISIONING_CHECK} Pending (Provisioning Request was successfully queued.)" in pending.summary
    ledger.record_many(ledger_rows(ledger.states(), [pending]))
    assert ledger_rows(ledger.states(), [pending]) == [], "an unchanged check is not recorded twice"

    retry = _observe(
        _workload([_check("Retry", "Provisioning Request failed: no capacity in zone", "2026-12-01T10:09:00Z", retryCount=1)])
    )
    (row,) = ledger_rows(ledger.states(), [retry])
    assert row[5]["admission_checks"][0]["state"] == "Retry" and row[5]["admission_checks"][0]["retry_count"] == 1
    assert row[5]["at"] == "2026-12-01T10:09:00Z", "a check's transition is the observation's time"
    ledger.record_many([row])

    ready = _observe(_workload([_check("Ready", "Provisioning Request was successfully provisioned.", "2026-12-01T10:14:00Z")]))
    (row,) = ledger_rows(ledger.states(), [ready])
    assert "admission checks Ready: gpu-platform-provisioning" in row[2]
    ledger.record_many([row])
    states = [e.details["admission_checks"][0]["state"] for e in ledger.events(RID) if e.event == "cluster"]
    assert states == ["Pending", "Retry", "Ready"]


def test_rejected_check_and_explain_show_the_policy_lines(ledger: Ledger, tmp_path: Path) -> None:
    rejected = _observe(_workload([_check("Rejected", "Provisioning Request failed permanently", "2026-12-01T10:30:00Z")]))
    ledger.record_many(ledger_rows(ledger.states(), [rejected]))
    url = str(ledger.engine.url)
    res = CliRunner().invoke(
        main, ["explain", RID, "--policy", str(NATIVE / "provisioning.yaml"), "--ledger", url, "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    (check,) = out["admission_checks"]
    assert (check["name"], check["state"]) == (PROVISIONING_CHECK, "Rejected")
    assert check["rule"].startswith("autoscaling.provisioning (node pools inference, spot")
    (step,) = [s for s in out["steps"] if s["event"] == "cluster"]
    assert "autoscaling.provisioning" in step["rule"]
    table = CliRunner().invoke(main, ["explain", RID, "--policy", str(NATIVE / "provisioning.yaml"), "--ledger", url])
    assert f"admission check {PROVISIONING_CHECK} (Kueue, last read back): Rejected: Provisioning Request failed permanently" in table.output


def test_multikueue_dispatch_names_the_site(ledger: Ledger) -> None:
    check = {
        "name": "gpu-platform-sites-sfo-depot-pit-depot",
        "state": "Ready",
        "message": 'The workload got reservation on "gpu-platform-pit-depot"',
        "lastTransitionTime": "2026-12-01T10:02:00Z",
    }
    obs = _observe(_workload([check], cluster_name="gpu-platform-pit-depot"))
    assert obs.cluster_name == "gpu-platform-pit-depot"
    assert "runs on worker cluster gpu-platform-pit-depot" in obs.summary
    ledger.record_many(ledger_rows(ledger.states(), [obs]))
    from gpu_platform.observe.queueview.explain import explain

    ex = explain(ledger, load_policy(NATIVE / "sites.yaml"), RID)
    (step,) = [s for s in ex.steps if s.event == "cluster"]
    assert "sites.sfo-depot/pit-depot (MultiKueue" in step.rule
    assert "worker cluster gpu-platform-pit-depot: sites.pit-depot" in step.rule


def test_a_workload_without_checks_records_as_before(ledger: Ledger) -> None:
    (wl,) = recorded("workloads", "team-platform")
    obs = _observe(wl)
    assert obs.admission_checks is None and obs.cluster_name is None
    (row,) = ledger_rows(ledger.states(), [obs])
    assert "admission_checks" not in row[5] and "admission check" not in row[2]
