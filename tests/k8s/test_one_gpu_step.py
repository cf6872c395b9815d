"""Only the workload step of a request's run asks for GPUs and joins a Kueue queue.

A release run holds the evidence pack, its blocking checks, the release and the release's checks:
each step becomes its own Job under `k8s_job_executor`. The steps are taken from the real
workload job of the Definitions, and each step's Job is built with dagster-k8s's own merge of
`step_k8s_config` and `per_step_k8s_config` (`resources.k8s.step_container_context`).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import kubernetes_validate
import pytest
from dagster_k8s import k8s_job_executor

from assets.workloads import JOB_FOR_WORKLOAD, make_workload_jobs, workload_assets, workload_checks
from gpu_platform.cluster.jobs import KUEUE_QUEUE_NAME, resolve_flavor
from resources.build import build_resources
from resources.k8s import k8s_run_config, render_job_manifest

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "examples" / "requests" / "release_chain"


def _gpu_count(job: dict) -> int:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return int((container.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))


@pytest.fixture(scope="module")
def workload_job(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    defs = dg.Definitions(
        assets=workload_assets,
        asset_checks=workload_checks,
        jobs=make_workload_jobs(k8s_job_executor),
        resources=build_resources("test", {"GPU_PLATFORM_HOME": str(home)}),
    )
    return {workload: defs.resolve_job_def(name) for workload, name in JOB_FOR_WORKLOAD.items()}


def _steps(jobs, workload: str) -> list[str]:
    """The steps of the job the gate launches for a request of `workload` (one job per kind)."""
    return sorted(n.name for n in jobs[workload].graph.nodes)


@pytest.mark.parametrize(
    "path",
    [CHAIN / "released_model.yaml", CHAIN / "released_map.yaml", ROOT / "examples" / "requests" / "release_eval.yaml"],
    ids=lambda p: p.stem,
)
def test_a_run_creates_exactly_one_gpu_job(path: Path, k8s_policy, example_request, workload_job) -> None:
    req = example_request(path)
    flavor = resolve_flavor(req, k8s_policy).name
    steps = _steps(workload_job, req.workload)
    if req.workload.startswith("released_"):
        pack = "model_evidence_pack" if req.workload == "released_model" else "map_evidence_pack"
        assert len(steps) == 12 and f"{pack}_lineage_complete" in steps
    jobs = {step: render_job_manifest(req, flavor, k8s_policy, step) for step in steps}
    gpu_jobs = [step for step, job in jobs.items() if _gpu_count(job)]
    assert gpu_jobs == [req.workload]
    queued = [step for step, job in jobs.items() if KUEUE_QUEUE_NAME in job["metadata"]["labels"]]
    assert queued == [req.workload]
    assert _gpu_count(jobs[req.workload]) == req.gpu_count
    team_ns = k8s_policy.team(req.team).namespace
    for step, job in jobs.items():
        kubernetes_validate.validate(job, "1.31.0", strict=True)
        assert job["metadata"]["namespace"] == team_ns
        assert ("suspend" in job["spec"]) is (step == req.workload), step
    assert len({job["metadata"]["name"] for job in jobs.values()}) == len(jobs)


def test_the_gate_run_config_validates_for_the_workload_job(k8s_policy, example_request, workload_job) -> None:
    req = example_request(CHAIN / "released_model.yaml")
    run_config = k8s_run_config(req, "l4-inference", k8s_policy, attempt=2)
    resolved = dg.validate_run_config(workload_job["released_model"], run_config)
    cfg = resolved["execution"]["k8s"]
    assert set(cfg["per_step_k8s_config"]) == {"released_model"}
    assert "resources" not in cfg["step_k8s_config"]["container_config"]
    assert cfg["per_step_k8s_config"]["released_model"]["job_metadata"]["labels"]["gpu-platform.io/attempt"] == "2"
