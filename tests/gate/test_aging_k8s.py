"""Aging on the cluster: the gate sets `kueue.x-k8s.io/priority-boost` on the Workloads Kueue
holds pending, to the boost due now, once per change, never on admitted or finished ones.

The cluster is the recorded-response API server of tests/k8s/fake_apiserver.py (no cluster where
the tests run; it takes a JSON merge patch of a Workload and answers it from then on), reached
through the real `kubernetes` client, as the sensor reaches a real one. The recorded Workloads
(tests/fixtures/kueue-workloads/README.md): the incident request's Workload is pending
(`QuotaReserved=False`), research's was preempted and requeued, release_eval's is admitted,
released_model's finished.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import yaml

from gpu_platform.cluster.aging import boost_patches, sync_boosts
from gpu_platform.cluster.readback import observe, read_kueue
from gpu_platform.policy.aging import PRIORITY_BOOST_ANNOTATION, priority_boost
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from tests.gate.helpers import tick
from tests.k8s.fake_apiserver import recorded, serve, submit_recorded, write_kubeconfig

INCIDENT = "req-20261201-9f8e7d6c5b"  # incident_response (ages: a step of its 60 s wait target)
RESEARCH = "req-20261201-5a6b7c8d9e"  # research_best_effort (no wait target: never boosts)
RELEASE = "req-20261201-a1b2c3d4e5"  # release_eval (ages), admitted
INCIDENT_WL = ("team-safety", "job-dagster-step-3d998695db571075b0d420dba9bc219f-51a47")
NAMESPACES = ["team-perception", "team-platform", "team-safety"]


def _observations():
    out = []
    for ns in NAMESPACES:
        out += observe(recorded("jobs", ns), recorded("workloads", ns), recorded("events", ns))
    return out


@pytest.fixture
def ledger(tmp_path, policy):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    # 10 steps of incident's 60 s and one second ago: the next step is 59 s away, more than a test takes
    submit_recorded(led, policy, at=datetime.now(UTC) - timedelta(seconds=601))
    return led


def _states(led):
    return led.states((*PENDING_STATES, *ACTIVE_STATES))


def test_only_the_pending_workload_of_an_aging_lane_is_due_a_boost(ledger, policy):
    states = _states(ledger)
    submitted = {s.request_id: s.submitted_at for s in states}
    now = submitted[INCIDENT] + timedelta(seconds=1000)  # 16 steps of incident's 60 s, 1 of release's 900 s
    patches = boost_patches(policy, states, _observations(), now)
    assert [(p.namespace, p.workload, p.request_id, p.boost, p.was) for p in patches] == [
        (*INCIDENT_WL, INCIDENT, 16, None)
    ]
    assert patches[0].body() == {"metadata": {"annotations": {PRIORITY_BOOST_ANNOTATION: "16"}}}
    # release_eval ages too and waited as long, but Kueue admitted its Workload: never patched
    assert priority_boost(policy, "release_eval", submitted[RELEASE], now) > 0
    assert RELEASE not in {p.request_id for p in patches}


def test_a_workload_at_its_boost_is_left_alone_until_the_next_step(ledger, policy):
    states = _states(ledger)
    t0 = next(s.submitted_at for s in states if s.request_id == INCIDENT)
    at10 = [replace(o, priority_boost="10") if o.request_id == INCIDENT else o for o in _observations()]
    assert boost_patches(policy, states, at10, t0 + timedelta(seconds=600)) == []
    assert boost_patches(policy, states, at10, t0 + timedelta(seconds=659)) == []
    (p,) = boost_patches(policy, states, at10, t0 + timedelta(seconds=660))
    assert (p.boost, p.was) == (11, "10")
    # a value Kueue cannot read (it counts it as 0) is replaced
    bad = [replace(o, priority_boost="ten") if o.request_id == INCIDENT else o for o in _observations()]
    assert [p.boost for p in boost_patches(policy, states, bad, t0 + timedelta(seconds=600))] == [10]


def test_a_boost_left_on_a_lane_that_does_not_age_is_removed(ledger, policy):
    states = _states(ledger)
    now = datetime.now(UTC)
    stale = [replace(o, priority_boost="5") if o.request_id == RESEARCH else o for o in _observations()]
    research = [p for p in boost_patches(policy, states, stale, now) if p.request_id == RESEARCH]
    assert [(p.boost, p.was) for p in research] == [(0, "5")]
    assert research[0].body() == {"metadata": {"annotations": {PRIORITY_BOOST_ANNOTATION: None}}}


def test_a_superseded_attempt_or_an_unknown_request_is_never_patched(ledger, policy):
    ledger.record(INCIDENT, "admitted", "again", flavor="h100-ondemand", details={"attempt": 2})
    now = datetime.now(UTC) + timedelta(hours=1)
    assert INCIDENT not in {p.request_id for p in boost_patches(policy, _states(ledger), _observations(), now)}
    assert boost_patches(policy, [], _observations(), now) == []


def test_the_patch_reaches_the_api_server_once_per_change(tmp_path, ledger, policy):
    states = _states(ledger)
    t0 = next(s.submitted_at for s in states if s.request_id == INCIDENT)
    with serve() as (url, seen):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", url))
        first, problems = sync_boosts(policy, states, read_kueue(NAMESPACES, kubeconfig), t0 + timedelta(seconds=600),
                                      kubeconfig)
        assert problems == [] and [p.boost for p in first] == [10]
        patches = [p for p in seen if p.startswith("PATCH ")]
        path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{}/workloads/{}".format(*INCIDENT_WL)
        assert patches == [f"PATCH {path} " + json.dumps({"metadata": {"annotations": {PRIORITY_BOOST_ANNOTATION: "10"}}})]
        # read back: the Workload carries it; the same instant again sends nothing
        again = read_kueue(NAMESPACES, kubeconfig)
        assert {o.request_id: o.priority_boost for o in again}[INCIDENT] == "10"
        assert sync_boosts(policy, states, again, t0 + timedelta(seconds=650), kubeconfig) == ([], [])
        # the next step: one more patch
        nxt, _ = sync_boosts(policy, states, again, t0 + timedelta(seconds=660), kubeconfig)
        assert [p.boost for p in nxt] == [11]
        assert len([p for p in seen if p.startswith("PATCH ")]) == 2


def test_a_refused_patch_is_reported_and_the_others_still_sent(ledger, policy):
    class Api:
        def __init__(self):
            self.sent = []

        def patch_namespaced_custom_object(self, group, version, ns, plural, name, body, **kw):
            self.sent.append((ns, name, kw.get("_content_type")))
            if ns == "team-safety":
                raise RuntimeError("forbidden: workloads.kueue.x-k8s.io is forbidden")

    states = _states(ledger)
    obs = [replace(o, priority_boost="5") if o.request_id == RESEARCH else o for o in _observations()]
    api = Api()
    patches, problems = sync_boosts(policy, states, obs, datetime.now(UTC) + timedelta(minutes=5), custom_api=api)
    assert {p.request_id for p in patches} == {INCIDENT, RESEARCH}
    assert len(api.sent) == 2 and {c for _, _, c in api.sent} == {"application/merge-patch+json"}
    assert problems == [f"{INCIDENT_WL[0]}/{INCIDENT_WL[1]}: RuntimeError: forbidden: workloads.kueue.x-k8s.io is forbidden"]


def test_the_sensor_tick_patches_the_pending_workload_once(tmp_path, ledger, policy):
    (tmp_path / "dagster").mkdir()
    with serve() as (server, seen), dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        resources = {
            "ledger": LedgerResource(url=ledger.url),
            "policy": PolicyResource(),
            "settings": PlatformSettings(
                home=str(tmp_path / "home"),
                executor="k8s",
                work_root="/var/lib/gpu-platform/work",
                work_claim="gpu-platform-work",
                kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", server)),
            ),
        }
        tick(instance, resources)
        patches = [p for p in seen if p.startswith("PATCH ")]
        assert len(patches) == 1 and INCIDENT_WL[1] in patches[0]
        value = json.loads(patches[0].split(" ", 2)[2])["metadata"]["annotations"][PRIORITY_BOOST_ANNOTATION]
        assert int(value) >= 10  # submitted 10 minutes ago, a step of 60 s
        tick(instance, resources)  # within the same minute: the Workload is at its boost
        assert [p for p in seen if p.startswith("PATCH ")] == patches


def test_the_deploy_steps_turn_kueues_priority_boost_gate_on_only_when_lanes_age(policy):
    from gpu_platform.deploy.steps import deploy_steps
    from gpu_platform.deploy.tree import DeploySettings
    from gpu_platform.policy import default_policy_path, parse_policy

    def kueue_commands(pol) -> tuple[str, ...]:
        return deploy_steps(pol, DeploySettings(), "var/deploy/tree")[0].commands

    on = kueue_commands(policy)  # incident_response, release_eval and candidate_train age
    assert any("--feature-gates=PriorityBoost=true" in c and "patch deployment kueue-controller-manager" in c for c in on)
    assert on[0].startswith("kubectl apply --server-side --force-conflicts -f ")
    assert on[-1].startswith("kubectl -n kueue-system wait ")
    raw = yaml.safe_load(default_policy_path().read_text())
    for lane in raw["lanes"].values():
        lane.pop("targets", None)
    off = kueue_commands(parse_policy(raw))
    assert not any("PriorityBoost" in c for c in off) and off[0].startswith("kubectl apply --server-side -f ")


def test_cluster_sync_sets_the_boost_and_a_dry_run_only_lists_it(tmp_path, ledger):
    from click.testing import CliRunner

    from gpu_platform.cli.app import main

    with serve() as (url, seen):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", url))
        args = ["cluster", "sync", "--ledger", ledger.url, "--kubeconfig", kubeconfig]
        dry = CliRunner().invoke(main, [*args, "--dry-run", "--format", "json"])
        assert dry.exit_code == 0, dry.output
        (boost,) = json.loads(dry.output)["priority_boosts"]
        assert (boost["request_id"], boost["workload"], boost["was"]) == (INCIDENT, INCIDENT_WL[1], None)
        assert boost["boost"] >= 10 and not [p for p in seen if p.startswith("PATCH ")]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 0, first.output
        assert "set the priority boost of 1 waiting Workload(s) (aging):" in first.output
        assert f"{INCIDENT_WL[0]}/{INCIDENT_WL[1]} ({INCIDENT}): priority boost +" in first.output
        assert len([p for p in seen if p.startswith("PATCH ")]) == 1
        again = CliRunner().invoke(main, [*args, "--format", "json"])
        assert json.loads(again.output)["priority_boosts"] == []
