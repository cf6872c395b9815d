"""Helpers for the gate tests: a real ledger, a real Dagster instance (`env` is a fixture)."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml
from dagster._core.storage.dagster_run import DagsterRun

from assets.gate import admission_sensor
from assets.workloads import JOB_FOR_WORKLOAD
from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_LANE, TAG_REQUEST_ID
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from tests.conftest import EXAMPLES


def raw_request(lane: str, **update) -> dict:
    raw = yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())
    raw.update(update)
    return raw


@pytest.fixture
def env(tmp_path, policy):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    resources = {
        "ledger": LedgerResource(url=url),
        "policy": PolicyResource(),
        "settings": PlatformSettings(home=str(tmp_path / "home")),
    }
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield instance, Ledger(url), resources, tmp_path / "home"


def tick(instance, resources):
    ctx = dg.build_sensor_context(instance=instance, resources=resources)
    return admission_sensor(ctx)


def submit(ledger, policy, lane, **update) -> str:
    return ledger.submit(validate_request(raw_request(lane, **update), policy))


def add_run(instance, request_id, attempt, status=dg.DagsterRunStatus.STARTED, lane="research_best_effort") -> str:
    run = DagsterRun(
        job_name=JOB_FOR_WORKLOAD["training_run"],
        status=status,
        tags={TAG_REQUEST_ID: request_id, TAG_ATTEMPT: str(attempt), TAG_LANE: lane},
    )
    instance.add_run(run)
    return run.run_id


def fill_h100(ledger, policy):
    """H100s busy up to the cohort's lendable quota: research borrows, baseline borrows, candidate in quota."""
    research = [
        submit(ledger, policy, "research_best_effort", gpu_type="h100-ondemand", gpu_count=8, experiment_id=f"exp-{i}", output_artifact_ids=[f"r{i}"])
        for i in range(2)
    ]
    others = [submit(ledger, policy, "baseline_rebuild"), submit(ledger, policy, "candidate_train")]
    return research, others


