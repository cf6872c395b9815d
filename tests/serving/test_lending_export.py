"""The Kueue export of lending (docs/serving.md, Lending idle serving GPUs): the serving
ClusterQueue lends its idle quota and reclaims it with Any in the batch lanes' cohort tree, the way
the engine does; who the gate keeps off its GPUs travels as annotations."""

from __future__ import annotations

from gpu_platform.admission.kueue_export import kueue_manifests
from gpu_platform.policy import load_policy
from gpu_platform.serving.lending import with_lending


def _cqs(policy) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in kueue_manifests(policy) if m["kind"] == "ClusterQueue"}


def _row(cq: dict, flavor: str) -> dict | None:
    for group in cq["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] == flavor:
                return next(r for r in f["resources"] if r["name"] == "nvidia.com/gpu")
    return None


def test_serving_cluster_queue_lends_and_reclaims():
    cqs = _cqs(with_lending(load_policy()))
    serving = cqs["online-serving"]
    row = _row(serving, "l4-inference")
    assert row["nominalQuota"] == "8" and row["borrowingLimit"] == "0" and "lendingLimit" not in row
    assert serving["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    ann = serving["metadata"]["annotations"]
    assert ann["gpu-platform.io/serving"] == "true" and ann["gpu-platform.io/protected"] == "true"
    lends = ann["gpu-platform.io/serving-lends-to"].split(",")
    held = ann["gpu-platform.io/serving-held-off"].split(",")
    assert "research-best-effort" in lends and "labeler-batch" in lends
    # candidate training borrows too (lend_to_evidence, with a 30m bound on the wait for its
    # checkpoint); release evaluation yields only to incident response
    assert "candidate-train" in lends and set(held) == {"platform-maintenance", "release-eval"}
    # a borrower has a row on the serving flavor without a borrowing limit, in the same tree
    research = cqs["research-best-effort"]
    r = _row(research, "l4-inference")
    assert r is not None and r["nominalQuota"] == "0" and "borrowingLimit" not in r
    cohorts = {m["metadata"]["name"]: m for m in kueue_manifests(load_policy()) if m["kind"] == "Cohort"}
    assert cohorts[research["spec"]["cohortName"]]["spec"].get("parentName") == serving["spec"]["cohortName"]


def test_shipped_policy_lends_its_idle_serving_gpus():
    """The packaged policy is work-conserving: the serving lane has no lending_limit, so its export
    is the same as `with_lending`'s, and it names who borrows and who the gate keeps off."""
    shipped, lent = _cqs(load_policy()), _cqs(with_lending(load_policy()))
    assert shipped["online-serving"] == lent["online-serving"]
    assert "lendingLimit" not in _row(shipped["online-serving"], "l4-inference")
    ann = shipped["online-serving"]["metadata"]["annotations"]
    assert "research-best-effort" in ann["gpu-platform.io/serving-lends-to"].split(",")
    assert "release-eval" in ann["gpu-platform.io/serving-held-off"].split(",")
