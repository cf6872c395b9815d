"""No secret leaves its variable: not into the repository snapshot, not into a workload's environment."""

import json
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from gpu_platform.requests.model import JobRequest
from resources.ledger import LedgerResource
from resources.local_executor import WORKLOAD_ENV_ALLOWLIST, LocalGpuExecutor

pytestmark = pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")

LEDGER_URL = "postgresql+psycopg2://gp:ledger-s3cret@db.internal:5432/gp"
DCGM = "http://scraper:dcgm-s3cret@gpu-node-1:9400/metrics"
PG_PASSWORD = "dagster-pg-s3cret"

DUMP_ENV = """
import json, os, sys
from dagster_pipes import open_dagster_pipes
with open_dagster_pipes() as pipes:
    open(sys.argv[1], "w").write(json.dumps(dict(os.environ)))
    pipes.report_asset_materialization(metadata={"ok": "yes"})
"""


@pytest.fixture
def secrets_in_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GPU_PLATFORM_LEDGER_URL", LEDGER_URL)
    monkeypatch.setenv("GPU_PLATFORM_DCGM_ENDPOINTS", DCGM)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", PG_PASSWORD)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cret")
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path / "home"))


def test_repository_snapshot_holds_variable_names_not_secrets(secrets_in_env):
    from assets.definitions import build_definitions

    for env_name in ("local", "prod"):
        repo = build_definitions(env_name).get_repository_def()
        snapshot = serialize_value(RepositorySnap.from_def(repo))
        assert "s3cret" not in snapshot
        assert "GPU_PLATFORM_LEDGER_URL" in snapshot
        assert "GPU_PLATFORM_DCGM_ENDPOINTS" in snapshot


def test_resources_resolve_the_variables_at_run_time(secrets_in_env):
    from resources.build import build_resources

    res = build_resources("prod")
    assert isinstance(res["ledger"].url, dg.EnvVar)
    assert res["settings"].dcgm_endpoint_list() == [DCGM]

    @dg.asset
    def url_seen(ledger: LedgerResource) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"scheme": ledger.url.split(":", 1)[0], "has": "s3cret" in ledger.url})

    with dg.instance_for_test() as instance:
        result = dg.materialize([url_seen], resources={"ledger": res["ledger"]}, instance=instance)
        (mat,) = result.asset_materializations_for_node("url_seen")
        assert mat.metadata["scheme"].value == "postgresql+psycopg2"
        assert mat.metadata["has"].value is True
        run = instance.get_run_by_id(result.run_id)
        assert "s3cret" not in json.dumps(run.run_config, default=str)


def test_workload_gets_the_allow_list_only(secrets_in_env, tmp_path: Path):
    script = tmp_path / "dump_env.py"
    script.write_text(DUMP_ENV)
    out = tmp_path / "env.json"
    request = JobRequest(
        request_id="req-env-check",
        gpu_count=1,
        command=(sys.executable, str(script), str(out)),
        env={"TRAINER_FLAG": "on"},
    )
    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="1", use_nvml=False)

    @dg.asset
    def training_run(context: dg.AssetExecutionContext, gpu_executor: LocalGpuExecutor):
        return gpu_executor.run(context, request, tmp_path / "ckpt").get_materialize_result()

    with dg.instance_for_test() as instance:
        assert dg.materialize([training_run], resources={"gpu_executor": executor}, instance=instance).success
    seen = json.loads(out.read_text())
    assert not [k for k, v in seen.items() if "s3cret" in v]
    for name in ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_DCGM_ENDPOINTS", "DAGSTER_PG_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert name not in seen
    assert seen["TRAINER_FLAG"] == "on"
    assert seen["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["PATH"]
    ours = {"TRAINER_FLAG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPU_PLATFORM_REQUEST_ID",
            "GPU_PLATFORM_CHECKPOINT_DIR"}
    others = {k for k in seen if k not in ours and k not in WORKLOAD_ENV_ALLOWLIST}
    assert all(k.startswith("DAGSTER_PIPES_") for k in others), others
