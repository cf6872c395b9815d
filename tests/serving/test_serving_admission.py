"""The admission engine admits a service's min replicas together against its lane's quota, or the
service waits with a reason naming what it lacks."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.policy_view import AdmittedRequest, PendingRequest, from_policy, workload_for
from gpu_platform.requests.model import validate_request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "requests" / "online_serving.yaml"


def _service(policy, rid: str, name: str, *, min_: int, max_: int, gpus: int = 1):
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw.update(name=name, gpu_count=gpus, service={**raw["service"], "replicas": {"min": min_, "max": max_}})
    return validate_request(raw, policy).model_copy(update={"request_id": rid})


def test_a_service_is_one_workload_of_its_min_replicas(policy):
    req = _service(policy, "svc-a", "svc-a", min_=3, max_=4, gpus=2)
    wl = workload_for(policy, req, "svc-a")
    assert wl.replicas == 3 and wl.pods == 3 and wl.requests == {"nvidia.com/gpu": 6.0}
    assert wl.cq == "online_serving" and wl.allowed_flavors == ("l4-inference",)
    held = workload_for(policy, req, "svc-a", flavor="l4-inference", replicas=4)
    assert held.replicas == 4 and held.requests == {"nvidia.com/gpu": 8.0}
    # a job is no service
    job = validate_request(yaml.safe_load((EXAMPLE.parent / "labeler_batch.yaml").read_text()), policy)
    assert workload_for(policy, job, "job").replicas == 0


def test_min_replicas_are_admitted_together(policy):
    req = _service(policy, "svc-a", "svc-a", min_=2, max_=6)
    res = admit_until_stable(from_policy(policy, pending=[PendingRequest(req)]))
    (adm,) = [a for a in res.admitted if a.name == "svc-a"]
    assert adm.flavor == "l4-inference" and adm.cq == "online_serving"
    # three replicas of 3 L4s (9) would never fit the lane's 8: refused at validation already;
    # four of 2 (8) fit an empty lane exactly
    req = _service(policy, "svc-c", "svc-c", min_=4, max_=4, gpus=2)
    res = admit_until_stable(from_policy(policy, pending=[PendingRequest(req)]))
    assert [a.name for a in res.admitted] == ["svc-c"]


def test_a_service_whose_min_does_not_fit_waits_naming_the_shortfall(policy):
    # another service holds 7 of the lane's 8 L4s (its current replicas, scaled up past its min)
    other = _service(policy, "svc-big", "svc-big", min_=2, max_=8)
    running = AdmittedRequest(other, "l4-inference", replicas=7)
    req = _service(policy, "svc-b", "svc-b", min_=2, max_=4)
    res = admit_until_stable(from_policy(policy, admitted=[running], pending=[PendingRequest(req)]))
    assert [a.name for a in res.admitted if a.name == "svc-b"] == []
    (info,) = [p for p in res.pending if p.name == "svc-b"]
    assert "service needs its min 2 replicas x 1 nvidia.com/gpu = 2 together, 1 short (1 free to it now)" in info.message
    assert info.message.startswith(f"{info.reason_code}: service needs its min 2 replicas")
    # the serving lane never borrows, so batch L4s idle elsewhere do not help it
    assert "online_serving needs 2 nvidia.com/gpu on l4-inference" in info.message

    # with one fewer replica running, its two fit
    running = AdmittedRequest(other, "l4-inference", replicas=6)
    res = admit_until_stable(from_policy(policy, admitted=[running], pending=[PendingRequest(req)]))
    assert [a.name for a in res.admitted if a.name == "svc-b"] == ["svc-b"]


def test_batch_work_never_preempts_a_service(policy):
    """The serving lane is protected and never borrows: a higher-priority batch lane with reclaim
    Any (incident response) cannot take its replicas, and batch lanes cannot use its 8 L4s."""
    svc = _service(policy, "svc-a", "svc-a", min_=8, max_=8)
    running = AdmittedRequest(svc, "l4-inference", replicas=8)
    raw = yaml.safe_load((EXAMPLE.parent / "labeler_batch.yaml").read_text())
    labels = [
        validate_request({**raw, "gpu_count": 4, "output_artifact_ids": [f"lbl-{i}"]}, policy).model_copy(
            update={"request_id": f"lbl-{i}"}
        )
        for i in range(5)
    ]
    state = from_policy(policy, admitted=[running], pending=[PendingRequest(r) for r in labels])
    res = admit_until_stable(state)
    assert res.preempted == []
    # the labelers get the batch L4s only (16: their own 4 plus borrowing up to 12); the 5th waits
    assert len([a for a in res.admitted if a.name.startswith("lbl-")]) == 3
    assert any(p.name.startswith("lbl-") for p in res.pending)
    # even incident response (priority 1000, reclaim Any) finds no serving victim
    wl = {w.name: w for w in state.admitted}["svc-a"]
    assert wl.requests == {"nvidia.com/gpu": 8.0} and wl.replicas == 8
