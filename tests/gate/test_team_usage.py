"""Admission Fair Sharing in front of a cluster: the gate reads each team's LocalQueue usage back
from Kueue (`status.fairSharing.admissionFairSharingStatus.consumedResources`) and orders the lane's
teams by it, as Kueue does; without it every team would look unused to the gate."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpu_platform.cluster.readback import read_team_usage, team_usage_of
from gpu_platform.gate.tick import plan_tick
from gpu_platform.policy.loading import default_policy_path, parse_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = ROOT / "examples" / "requests" / "research_best_effort.yaml"
GPU = "nvidia.com/gpu"


@pytest.fixture
def afs_policy():
    raw = yaml.safe_load(default_policy_path().read_text())
    raw["lanes"]["research_best_effort"]["admission_fair_sharing"] = {"team_weights": {}}
    return parse_policy(raw)


def _lq(namespace: str, name: str, consumed: dict | None) -> dict:
    """A LocalQueue as Kueue v1beta2 reports it (`kubectl get localqueue -o json`)."""
    status: dict = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}
    if consumed is not None:
        status["fairSharing"] = {"weightedShare": 0, "admissionFairSharingStatus": {
            "consumedResources": consumed, "lastUpdate": "2026-12-02T10:00:00Z"}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": name}, "status": status}


def test_usage_is_read_per_lane_and_team_from_the_local_queues(afs_policy) -> None:
    lqs = [
        _lq("team-perception", "research-best-effort", {GPU: "12", "cpu": "96", "memory": "512Gi"}),
        _lq("team-planning", "research-best-effort", None),  # not sampled yet: no usage
        _lq("team-perception", "candidate-train", {GPU: "40"}),  # a lane without fair sharing
        _lq("someone-else", "research-best-effort", {GPU: "99"}),  # no team owns the namespace
    ]
    usage = team_usage_of(lqs, afs_policy)
    assert set(usage) == {"research_best_effort"}
    got = usage["research_best_effort"]
    assert set(got) == {"perception"}
    assert got["perception"][GPU] == 12.0
    assert got["perception"]["memory"] == 512 * 2**30


def test_a_bad_quantity_names_the_local_queue_and_the_field(afs_policy) -> None:
    with pytest.raises(ValueError, match=r"team-perception/research-best-effort: status\.fairSharing\..*nvidia\.com/gpu"):
        team_usage_of([_lq("team-perception", "research-best-effort", {GPU: "twelve"})], afs_policy)


class _CustomObjects:
    """The `CustomObjectsApi` call the read makes, answered from a dict (no cluster here)."""

    def __init__(self, by_ns: dict[str, list[dict]]):
        self.by_ns = by_ns
        self.asked: list[tuple] = []

    def list_namespaced_custom_object(self, group, version, namespace, plural):
        self.asked.append((group, version, namespace, plural))
        return {"items": self.by_ns.get(namespace, [])}


def test_the_read_lists_local_queues_in_the_team_namespaces_only_when_a_lane_shares_fairly(afs_policy, policy) -> None:
    api = _CustomObjects({"team-perception": [_lq("team-perception", "research-best-effort", {GPU: "3"})]})
    assert read_team_usage(afs_policy, custom_api=api) == {"research_best_effort": {"perception": {GPU: 3.0}}}
    assert {a[2] for a in api.asked} == {t.namespace for t in afs_policy.teams.values()}
    assert {a[:2] + a[3:] for a in api.asked} == {("kueue.x-k8s.io", "v1beta2", "localqueues")}
    idle = _CustomObjects({})
    assert read_team_usage(policy, custom_api=idle) == {} and idle.asked == []  # packaged policy: no AFS


def test_the_gate_orders_the_lanes_teams_by_their_usage(tmp_path, afs_policy) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    base = yaml.safe_load(RESEARCH.read_text())
    ids = []
    # two of 8 spot A100s fit the 16 there; perception submitted first (twice), then planning (twice)
    teams = [("perception", "CC-1010"), ("perception", "CC-1010"), ("planning", "CC-1020"), ("planning", "CC-1020")]
    for i, (team, cc) in enumerate(teams):
        raw = {**base, "team": team, "cost_center": cc, "gpu_count": 8, "experiment_id": f"exp-{i}",
               "data_access_scope": "fleet-logs", "output_artifact_ids": [f"ckpt-{team}-exp-{i}"]}  # each team its own
        ids.append(led.submit(validate_request(raw, afs_policy)))
    now = datetime.now(UTC)
    # no usage known: perception's first (submitted first), then its entry penalty puts planning next
    plain = plan_tick(afs_policy, led.states(), now)
    assert {x.request_id for x in plain.launches} == {ids[0], ids[2]}
    # perception has used much (Kueue says so on its LocalQueue): both of planning's go first
    fair = plan_tick(afs_policy, led.states(), now, team_usage={"research_best_effort": {"perception": {GPU: 500.0}}})
    assert {x.request_id for x in fair.launches} == {ids[2], ids[3]}
