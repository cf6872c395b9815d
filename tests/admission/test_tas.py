"""Kueue's Topology Aware Scheduling rule in the engine (`admission/tas.py`) and on the policy.

The table restates `checkPodSetAndFlavorMatchForTAS` (kubernetes-sigs/kueue
pkg/scheduler/flavorassigner/tas_flavorassigner.go); the cases in
tests/fixtures/admission/tas.yaml run it through whole cycles.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.admission.model import (
    TAS_FOLLOWS_FLAVOR,
    TAS_PREFERRED,
    TAS_REQUIRED,
    TAS_UNCONSTRAINED,
    Workload,
)
from gpu_platform.admission.policy_view import AdmittedRequest, PendingRequest, from_policy, workload_for
from gpu_platform.admission.tas import is_tas_only, topology_refusal
from gpu_platform.requests.model import validate_request, validate_request_file

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
ONLY = 'Flavor "f" supports only TopologyAwareScheduling'
NO_TAS = 'Flavor "f" does not support TopologyAwareScheduling'
NO_LEVEL = 'Flavor "f" does not contain the requested level'


@pytest.mark.parametrize(
    ("levels", "topology", "level", "tas_only", "want"),
    [
        # no annotation: a topology-aware flavor only in a TAS-only queue (TAS implied there)
        ((), None, None, False, None),
        (LEVELS, None, None, False, ONLY),
        (LEVELS, None, None, True, None),
        # an explicit request: topology-aware flavors only, with the level
        ((), TAS_UNCONSTRAINED, None, False, NO_TAS),
        (LEVELS, TAS_UNCONSTRAINED, None, False, None),
        ((), TAS_REQUIRED, LEVELS[0], True, NO_TAS),
        (LEVELS, TAS_REQUIRED, LEVELS[0], False, None),
        (LEVELS, TAS_PREFERRED, "cloud.provider.com/rack", False, NO_LEVEL),
        # the platform's Jobs are annotated for the flavor they get
        ((), TAS_FOLLOWS_FLAVOR, None, False, None),
        (LEVELS, TAS_FOLLOWS_FLAVOR, None, False, None),
    ],
)
def test_topology_refusal_is_kueues_check(levels, topology, level, tas_only, want) -> None:
    assert topology_refusal("f", levels, topology, level, tas_only) == want


def test_a_queue_is_tas_only_when_every_flavor_of_every_group_is_topology_aware() -> None:
    levels = {"h100": LEVELS, "mig": ()}
    assert is_tas_only(["h100"], levels)
    assert not is_tas_only(["h100", "mig"], levels)
    assert not is_tas_only(["h100", "unknown"], levels)


def test_the_engine_sees_the_exports_topologies(policy) -> None:
    """One rule for both: a flavor is topology-aware in the engine exactly when the export gives
    its ResourceFlavor a `topologyName`, with that Topology's levels."""
    exported = kueue_manifests(policy)
    topologies = {
        m["metadata"]["name"]: tuple(lv["nodeLabel"] for lv in m["spec"]["levels"])
        for m in exported
        if m["kind"] == "Topology"
    }
    want = {
        m["metadata"]["name"]: topologies[m["spec"]["topologyName"]] if "topologyName" in m["spec"] else ()
        for m in exported
        if m["kind"] == "ResourceFlavor"
    }
    got = {f.name: f.topology_levels for f in from_policy(policy).flavors}
    assert got == want
    assert got["h100-ondemand"] == LEVELS and not got["l4-inference"]


def test_requests_carry_their_jobs_topology_request(policy) -> None:
    single = validate_request_file(ROOT / "examples" / "requests" / "release_eval.yaml", policy)
    gang = validate_request_file(ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml", policy)
    w = workload_for(policy, single, "a")
    assert (w.topology, w.topology_level) == (TAS_FOLLOWS_FLAVOR, None)
    w = workload_for(policy, gang, "b")
    assert (w.topology, w.topology_level) == (TAS_PREFERRED, "topology.kubernetes.io/zone")
    hostname = gang.topology.model_copy(update={"required": "kubernetes.io/hostname", "preferred": None})
    required = gang.model_copy(update={"topology": hostname})
    w = workload_for(policy, required, "c")
    assert (w.topology, w.topology_level) == (TAS_REQUIRED, "kubernetes.io/hostname")
    assert Workload("d", "q", {}).topology == TAS_FOLLOWS_FLAVOR  # a Job the platform renders


def test_a_gang_asking_for_a_topology_waits_for_the_h100s_rather_than_take_the_spot_a100s(policy) -> None:
    """Before, the engine put a `topology: {preferred: ...}` gang of `gpu_type: any` on the A100s
    when the H100s were taken; Kueue refuses them (`does not support TopologyAwareScheduling`)."""
    gang = validate_request_file(ROOT / "examples" / "distributed" / "candidate_train_2x8.yaml", policy)
    raw = gang.model_dump(exclude_none=True, exclude={"nodes", "gpus_per_node"})
    anygang = validate_request({**raw, "gpu_type": "any"}, policy).model_copy(update={"request_id": "req-gang-any"})
    cand = validate_request_file(ROOT / "examples" / "requests" / "candidate_train.yaml", policy)
    running = [AdmittedRequest(cand.model_copy(update={"request_id": f"run-{i}"}), "h100-ondemand") for i in range(4)]
    res = admit_until_stable(from_policy(policy, admitted=running, pending=[PendingRequest(anygang)]))
    assert res.admitted == []
    (waiting,) = res.pending
    assert "on h100-ondemand" in waiting.message and waiting.queue == "inadmissible"
    plain = anygang.model_copy(update={"topology": None, "request_id": "req-gang-plain"})
    res = admit_until_stable(from_policy(policy, admitted=running, pending=[PendingRequest(plain)]))
    assert [(a.name, a.flavor) for a in res.admitted] == [("req-gang-plain", "a100-spot")]
