"""The workload assets end to end: real SQLite ledger, real evidence store, real demo programs run
through the local executor and dagster-pipes, on a test Dagster instance."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from assets.workloads import (
    JOB_FOR_WORKLOAD,
    TAG_BLOCKED_BY,
    TAG_BLOCKED_FIX,
    TAG_BLOCKED_MISSING,
    release_job,
    retention_sweep,
    workload_assets,
    workload_checks,
    workload_jobs,
    workload_schedules,
)
from gpu_platform.cli.lineage import lineage
from gpu_platform.lineage.graph import LineageStore
from gpu_platform.requests.ledger import Ledger
from resources.evidence import EvidenceStoreResource
from resources.ledger import LedgerResource
from resources.local_executor import LocalGpuExecutor
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from resources.warehouse import Warehouse

from .conftest import CHAIN, EXAMPLES, Platform, priced_warehouse

REQUIRED_METADATA = {
    "request_id", "lane", "team", "source_commit", "container_digest", "dataset_ids", "map_ids", "taxonomy_ids",
    "checkpoint_uri", "log_digest", "output_artifact_ids", "gpu_hours", "attempts", "exit_status", "upstream",
}


def add_partitions(instance, p: Platform, *request_ids: str) -> None:
    """Add each request to its own workload kind's partition set (what the admission sensor does)."""
    for rid in request_ids:
        instance.add_dynamic_partitions(f"{p.ledger.get(rid).workload}_requests", [rid])


def materialize(p: Platform, instance, selection: list[str], partition: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [*workload_assets, *workload_checks],
        selection=dg.AssetSelection.assets(*selection),
        partition_key=partition,
        instance=instance,
        resources=p.resources,
        raise_on_error=False,
    )


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Label batch -> training run -> replay, and map segmentation -> map replay, materialized once."""
    tmp = tmp_path_factory.mktemp("chain")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    priced_warehouse(tmp / "warehouse.duckdb")  # the cost models have priced through yesterday
    resources = {
        "ledger": LedgerResource(url=url),
        "policy": PolicyResource(),
        "evidence": EvidenceStoreResource(root=str(tmp / "evidence"), work_root=str(tmp / "work")),
        "executor": LocalGpuExecutor(use_nvml=False, local_gpus="8", state_dir=str(tmp / "gpus")),
        "warehouse": Warehouse(path=str(tmp / "warehouse.duckdb")),
        "settings": PlatformSettings(home=str(tmp)),
    }
    p = Platform(tmp, Ledger(url), resources)
    ids = {
        "label_batch": p.submit(EXAMPLES / "labeler_batch.yaml", "req-label", env={"DEMO_FRAMES": "200"}),
        "training_run": p.submit(EXAMPLES / "candidate_train.yaml", "req-train", env={"DEMO_STEPS": "60"}),
        "replay": p.submit(EXAMPLES / "release_eval.yaml", "req-replay"),
        "map_segmentation": p.submit(EXAMPLES / "map_semantic_batch.yaml", "req-map"),
        "replay_map": p.submit(CHAIN / "replay_map.yaml", "req-replay-map"),
    }
    with dg.instance_for_test() as instance:
        add_partitions(instance, p, *ids.values())
        results = {}
        for key, rid in ids.items():
            kind = "replay" if key == "replay_map" else key
            results[key] = materialize(p, instance, [kind], rid)
            assert results[key].success, key
        yield p, instance, ids, results


def test_program_assets_record_the_metadata_and_lineage(chain):
    p, _, ids, results = chain
    for key in ("label_batch", "training_run", "replay", "map_segmentation"):
        kind = key
        mat = results[key].asset_materializations_for_node(kind)[0]
        assert mat.partition == ids[key]
        assert REQUIRED_METADATA <= set(mat.metadata), REQUIRED_METADATA - set(mat.metadata)
        assert mat.metadata["exit_status"].value == 0
        assert mat.metadata["log_digest"].value.startswith("sha256:")
        assert p.store.verify(mat.metadata["log_digest"].value)
    train = results["training_run"].asset_materializations_for_node("training_run")[0].metadata
    assert [r.data for r in train["upstream"].value.records] == [
        {"asset": "label_batch", "request_id": "req-label", "via_id": "lbl-batch-2026-11-28"}]
    assert "(/assets/label_batch?view=partitions&partition=req-label)" in train["upstream_links"].value
    assert train["checkpoint_uri"].value.endswith("ckpt-00000060.npz")
    assert train["steps_done"].value == 60, "the program's own pipes-reported metadata is kept"
    label = results["label_batch"].asset_materializations_for_node("label_batch")[0].metadata
    assert label["accepted"].value + label["rejected"].value == 200
    replay = p.lineage.latest_run("req-replay", "replay")
    assert replay.results["suites"]["eval-scenario-suite-v7"]["status"] == "passed"
    assert replay.odd_cell == "odd-urban-day"


def test_complete_release_materializes_with_every_check_passing_and_lineage_prints(chain):
    p, instance, _, _ = chain
    rid = p.submit(CHAIN / "released_model.yaml", "req-release")
    add_partitions(instance, p, rid)
    res = materialize(p, instance, ["model_evidence_pack", "released_model"], rid)
    assert res.success
    evals = {(e.asset_key.to_user_string(), e.check_name): e for e in res.get_asset_check_evaluations()}
    assert len(evals) == 10
    assert all(e.passed for e in evals.values()), {k: e.description for k, e in evals.items() if not e.passed}
    # the chain ran today, after the last priced day (yesterday): its program stages await today's
    # pricing, which passes, and the check names each of them
    cost = evals[("released_model", "cost_attributed")]
    awaiting = cost.metadata["awaiting_pricing"].value
    assert cost.metadata["awaiting_pricing_count"].value == len(awaiting) == 3
    assert {a.split(" (")[0] for a in awaiting} == {"label_batch req-label", "training_run req-train", "replay req-replay"}
    assert "awaiting pricing (3): " in cost.description and "priced by the cost models through" in cost.description
    assert instance.get_latest_materialization_event(dg.AssetKey("released_model")) is not None
    # the pack put every upstream log under hold: a sweep far in the future keeps all of them
    report = p.store.sweep(datetime.now(UTC) + timedelta(days=36500), dry_run=True)
    held = p.store.held_digests()
    for n in LineageStore(p.ledger.engine).tree(rid).unique():
        assert n.run.log_digest in held
        assert n.run.log_digest not in report.deleted
    out = CliRunner().invoke(lineage, ["release-perception-2026.12", "--ledger", p.resources["ledger"].url, "--strict"])
    assert out.exit_code == 0, out.output
    for needle in ("released_model req-release", "evidence_pack req-release", "replay req-replay",
                   "training_run req-train", "label_batch req-label", "ds-frames-2026-11"):
        assert needle in out.output


def test_incomplete_evidence_pack_blocks_the_release_in_the_same_run(chain):
    p, instance, _, _ = chain
    rid = p.submit(
        CHAIN / "released_model.yaml",
        "req-release-night",
        evaluator_ids=("eval-scenario-suite-v7", "eval-night-cutins-v2"),
        output_artifact_ids=("release-perception-2026.12-night",),
    )
    add_partitions(instance, p, rid)
    res = materialize(p, instance, ["model_evidence_pack", "released_model"], rid)
    assert not res.success
    assert [m.partition for m in res.asset_materializations_for_node("model_evidence_pack")] == [rid]
    assert res.asset_materializations_for_node("released_model") == []
    assert not [e for e in res.all_events if e.step_key == "released_model" and e.event_type_value == "STEP_START"]
    failing = [e for e in res.get_asset_check_evaluations() if not e.passed]
    assert [(e.asset_key.to_user_string(), e.check_name) for e in failing] == [("model_evidence_pack", "replay_coverage")]
    assert failing[0].severity == dg.AssetCheckSeverity.ERROR
    assert "suite eval-night-cutins-v2 for ODD cell odd-urban-day: not replayed" in failing[0].description
    # readable per partition: the evaluation names its request and lists what is missing
    assert failing[0].metadata["request_id"].value == rid
    assert "- suite eval-night-cutins-v2" in failing[0].metadata["missing_md"].value
    latest = instance.get_latest_materialization_event(dg.AssetKey("released_model"))
    assert latest is None or latest.dagster_event.partition != rid
    # the run says which check, what is missing and what to run (not Dagster's generic error)
    (failure,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "model_evidence_pack_replay_coverage"
    message = failure.step_failure_data.error.message
    assert "blocked by model_evidence_pack.replay_coverage: missing eval-night-cutins-v2" in message
    assert "To fix: replay suite(s) eval-night-cutins-v2 for ODD cell odd-urban-day" in message
    assert "gpu-platform submit" in message and "blocking asset check failed" not in message
    tags = instance.get_run_by_id(res.run_id).tags
    assert tags[TAG_BLOCKED_BY] == "model_evidence_pack.replay_coverage"
    assert tags[TAG_BLOCKED_MISSING] == "eval-night-cutins-v2"
    assert tags[TAG_BLOCKED_FIX].startswith("replay suite(s) eval-night-cutins-v2")
    # `lineage` shows the pack blocked by that check, with what to run; the other checks were not disturbed
    assert {e.check_name for e in res.get_asset_check_evaluations() if e.passed} >= {"lineage_complete", "reproducible"}
    url = p.resources["ledger"].url
    out = CliRunner().invoke(lineage, [rid, "--ledger", url])
    assert "evidence_pack req-release-night blocked by model_evidence_pack.replay_coverage" in out.stdout
    assert "to fix: replay suite(s) eval-night-cutins-v2" in out.stdout
    assert "is blocked by replay_coverage" in out.stderr
    doc = json.loads(CliRunner().invoke(lineage, [rid, "--ledger", url, "--json"]).stdout)
    assert doc["status"] == "blocked" and doc["blocked_by"][0]["check"] == "replay_coverage"
    assert CliRunner().invoke(lineage, [rid, "--ledger", url, "--strict"]).exit_code == 1


def _pack_cost_check(p: Platform, instance, rid: str, warehouse: Path, enforce: bool = True):
    resources = {**p.resources, "warehouse": Warehouse(path=str(warehouse))}
    res = dg.materialize(
        [*workload_assets, *workload_checks],
        selection=dg.AssetSelection.assets("evidence_pack"),
        partition_key=rid,
        instance=instance,
        resources=resources,
        raise_on_error=False,
        run_config={"ops": {"evidence_pack_cost_attributed": {"config": {"enforce": enforce}}}},
    )
    return next(e for e in res.get_asset_check_evaluations() if e.check_name == "cost_attributed")


def test_cost_check_names_unpriced_requests_once_their_day_is_priced(chain, tmp_path: Path, monkeypatch):
    import assets.workloads as workloads

    p, instance, _, _ = chain
    rid = p.submit(CHAIN / "evidence_pack.yaml", "req-pack-cost")
    add_partitions(instance, p, rid)
    # a day later: the chain's day (today) has been priced, req-train and req-label were, req-replay not
    today = datetime.now(UTC).date()
    monkeypatch.setattr(workloads, "_today", lambda: today + timedelta(days=1))
    wh = priced_warehouse(tmp_path / "wh.duckdb", {"req-train": 12.5, "req-label": 1.25}, through=today)
    cost = _pack_cost_check(p, instance, rid, wh)
    assert not cost.passed and cost.severity == dg.AssetCheckSeverity.ERROR
    assert "replay req-replay: no priced cost in the cost models" in cost.description
    assert "req-train" not in cost.description
    assert cost.metadata["awaiting_pricing"].value == []


def test_cost_check_fails_without_the_cost_models_and_says_what_to_run(chain, tmp_path: Path):
    import duckdb

    p, instance, _, _ = chain
    rid = p.submit(CHAIN / "evidence_pack.yaml", "req-pack-no-models")
    add_partitions(instance, p, rid)
    # no warehouse at all: ERROR (the default), naming the missing models and what builds them
    cost = _pack_cost_check(p, instance, rid, tmp_path / "none.duckdb")
    assert not cost.passed and cost.severity == dg.AssetCheckSeverity.ERROR
    assert "the cost models have not been built" in cost.description
    assert "cost cannot be attributed" in cost.description or "no stage's cost can be attributed" in cost.description
    assert "finops_daily" in cost.description and "gpu-platform cost build" in cost.description
    assert cost.metadata["cost_models"].value is False
    # a warehouse without the cost table fails the same way; enforce=false makes it a WARN
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    cost = _pack_cost_check(p, instance, rid, empty, enforce=False)
    assert not cost.passed and cost.severity == dg.AssetCheckSeverity.WARN
    assert "has no fct_gpu_cost_by_request table" in cost.description


def test_map_release_via_its_job_definition(chain):
    p, instance, _, _ = chain
    rid = p.submit(CHAIN / "released_map.yaml", "req-release-map")
    add_partitions(instance, p, rid)
    defs = dg.Definitions(assets=workload_assets, asset_checks=workload_checks, jobs=workload_jobs, resources=p.resources)
    job = defs.resolve_job_def(JOB_FOR_WORKLOAD["released_map"])
    res = job.execute_in_process(instance=instance, partition_key=rid, raise_on_error=False)
    assert res.success
    assert all(e.passed for e in res.get_asset_check_evaluations())
    kinds = {(n.kind, n.request_id) for n in p.lineage.tree(rid).unique()}
    assert {("released_map", rid), ("evidence_pack", rid), ("replay", "req-replay-map"), ("map_segmentation", "req-map")} <= kinds


def test_failed_upstream_is_recorded_and_named_by_the_lineage_check(tmp_path: Path, platform: Platform, instance):
    broken = platform.submit(
        EXAMPLES / "release_eval.yaml", "req-replay-broken",
        command=(sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"),
    )
    pack = platform.submit(CHAIN / "evidence_pack.yaml", "req-pack")
    add_partitions(instance, platform, broken, pack)
    res = materialize(platform, instance, ["replay"], broken)
    assert not res.success
    run = platform.lineage.latest_run(broken, "replay")
    assert (run.status, run.exit_status) == ("failed", 3)
    res = materialize(platform, instance, ["evidence_pack"], pack)
    failing = {e.check_name: e.description for e in res.get_asset_check_evaluations() if not e.passed}
    assert "replay req-replay-broken (via replay-rel-2026.12-urban-day): failed (exit status 3)" in failing["lineage_complete"]
    assert "suite eval-scenario-suite-v7 for ODD cell odd-urban-day: not replayed" in failing["replay_coverage"]
    assert "cost_attributed" not in failing


def test_a_partition_of_another_kind_is_refused(platform: Platform, instance):
    rid = platform.submit(EXAMPLES / "labeler_batch.yaml", "req-label-only")
    add_partitions(instance, platform, rid)
    # a label batch request is no partition of training_run: Dagster refuses the key
    with pytest.raises(dg.DagsterUnknownPartitionError):
        materialize(platform, instance, ["training_run"], rid)
    # and should someone add it to the training runs' set by hand, the asset refuses it
    instance.add_dynamic_partitions("training_run_requests", [rid])
    res = materialize(platform, instance, ["training_run"], rid)
    assert not res.success
    failure = next(e for e in res.all_events if e.event_type_value == "STEP_FAILURE")
    assert "req-label-only is a label_batch request" in failure.event_specific_data.error.message + str(
        failure.event_specific_data.user_failure_data
    )


def test_retention_sweep_job_reports_and_never_touches_held_evidence(platform: Platform, instance):
    store = platform.store
    old = datetime.now(UTC) - timedelta(days=1)
    gone = store.put(b"expired scratch", "req-x", "log", old)
    kept = store.put(b"incident log", "req-inc", "log", old)
    store.set_hold("req-inc", "incident", "INC-2026-1127-04")
    job = dg.Definitions(jobs=[retention_sweep], resources=platform.resources).resolve_job_def("retention_sweep")
    dry = job.execute_in_process(instance=instance, run_config={"ops": {"sweep_evidence": {"config": {"dry_run": True}}}})
    assert dry.output_for_node("sweep_evidence")["deleted"] == [gone.digest]
    assert store.exists(gone.digest)
    res = job.execute_in_process(instance=instance)
    out = res.output_for_node("sweep_evidence")
    assert out["deleted"] == [gone.digest]
    assert dict(out["kept"])[kept.digest].startswith("held: request req-inc under hold by incident")
    assert store.verify(kept.digest) and not store.exists(gone.digest)


def test_definitions_snapshot(platform: Platform):
    defs = dg.Definitions(
        assets=workload_assets,
        asset_checks=workload_checks,
        jobs=workload_jobs,
        schedules=workload_schedules,
        resources=platform.resources,
    )
    defs.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"label_batch", "training_run", "replay", "map_segmentation", "evidence_pack",
                    "model_evidence_pack", "map_evidence_pack", "released_model", "released_map"}
    deps = {k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()}
    assert deps["released_model"] == {"model_evidence_pack"} and deps["training_run"] == {"label_batch"}
    assert deps["released_map"] == {"map_evidence_pack"}
    assert deps["map_evidence_pack"] == {"map_segmentation", "replay"}
    # one partition set per workload kind; a release's pack shares its release's set
    sets = {k.to_user_string(): graph.get(k).partitions_def.name for k in graph.get_all_asset_keys()}
    assert sets["label_batch"] == "label_batch_requests" and sets["training_run"] == "training_run_requests"
    assert sets["model_evidence_pack"] == sets["released_model"] == "released_model_requests"
    assert sets["map_evidence_pack"] == sets["released_map"] == "released_map_requests"
    assert sets["evidence_pack"] == "evidence_pack_requests"
    # no partition mapping between different requests: a training run's partition depends on no
    # label batch partition by key; its real upstream requests are its `upstream` metadata
    mapping = graph.get_partition_mapping(dg.AssetKey("training_run"), dg.AssetKey("label_batch"))
    assert isinstance(mapping, dg.SpecificPartitionsPartitionMapping) and not mapping.partition_keys
    assert isinstance(graph.get_partition_mapping(dg.AssetKey("released_model"), dg.AssetKey("model_evidence_pack")),
                      dg.IdentityPartitionMapping)
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert len(checks) == 25
    for spec in (c for a in workload_checks for c in a.check_specs):
        assert spec.blocking
    assert {j.name for j in workload_jobs} == set(JOB_FOR_WORKLOAD.values()) | {"retention_sweep"}
    assert release_job.name == "release_model_job"


def _preempt_when_checkpointed(work: Path, at_step: int, done: list) -> None:
    """Play the preemptor: SIGTERM the training process once it has checkpointed `at_step`."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        logs = list(work.glob("out/*/logs/train-*.log"))
        steps = [int(p.stem.split("-")[1]) for p in work.glob("checkpoints/training_run/ckpt-*.npz")]
        if logs and steps and max(steps) >= at_step:
            pid = int(logs[0].stem.rsplit("-", 1)[1])
            os.kill(pid, signal.SIGTERM)
            done.append(pid)
            return
        time.sleep(0.01)


def test_preempted_training_asset_resumes_from_its_checkpoint(platform: Platform, instance):
    """SIGTERM (what a preemption sends) mid-run: the program checkpoints and exits 143, the stage
    is recorded as preempted, and the next attempt resumes from that step."""
    label = platform.submit(EXAMPLES / "labeler_batch.yaml", "req-label-p")
    rid = platform.submit(
        EXAMPLES / "candidate_train.yaml",
        "req-train-p",
        env={"DEMO_STEPS": "300", "DEMO_CHECKPOINT_EVERY": "25", "DEMO_STEP_SECONDS": "0.01"},
    )
    add_partitions(instance, platform, label, rid)
    killed: list[int] = []
    preemptor = threading.Thread(
        target=_preempt_when_checkpointed, args=(platform.resources["evidence"].work_dir(rid), 50, killed)
    )
    preemptor.start()
    first = materialize(platform, instance, ["training_run"], rid)
    preemptor.join()
    assert killed and not first.success
    preempted = platform.lineage.latest_run(rid, "training_run")
    assert (preempted.status, preempted.exit_status) == ("preempted", 143)
    assert preempted.log_digest and platform.store.verify(preempted.log_digest)
    reached = preempted.results["steps_done"]
    assert 50 <= reached < 300

    second = materialize(platform, instance, ["training_run"], rid)
    assert second.success
    md = second.asset_materializations_for_node("training_run")[0].metadata
    assert md["resumed_from_step"].value == reached, "nothing lost: SIGTERM checkpointed the current step"
    assert md["attempts"].value == 2
    assert md["steps_done"].value == 300


def test_a_release_launched_without_its_evidence_step_is_refused(chain):
    """Defence in depth: released_model alone (no evidence_pack step in the run) re-checks the
    evidence itself and refuses, naming the gap."""
    p, instance, _, _ = chain
    rid = p.submit(
        CHAIN / "released_model.yaml",
        "req-release-alone",
        evaluator_ids=("eval-scenario-suite-v7", "eval-rain-v1"),
        output_artifact_ids=("release-perception-2026.12-rain",),
    )
    add_partitions(instance, p, rid)
    res = materialize(p, instance, ["released_model"], rid)
    assert not res.success
    failure = next(e for e in res.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no evidence pack; run release_model_job" in str(failure.event_specific_data.user_failure_data)
    materialize(p, instance, ["model_evidence_pack"], rid)  # its blocking check fails, but the pack exists
    res = materialize(p, instance, ["released_model"], rid)
    assert not res.success
    failure = next(e for e in res.all_events if e.event_type_value == "STEP_FAILURE")
    assert "suite eval-rain-v1 for ODD cell odd-urban-day: not replayed" in str(
        failure.event_specific_data.user_failure_data
    )


def test_a_release_cost_check_claims_the_warehouse_slot_ahead_of_pricing_steps():
    """The check reads the warehouse in the writers' pool; its step priority plus any workload
    run's (a lane rank, 0..7) outranks today's pricing steps, so a release waits one pricing step
    at most, and a backfill's never."""
    from assets.workloads import workload_checks
    from gpu_platform.gate.instance_config import (
        BACKFILL_PRIORITY,
        PRIORITY_TAG,
        TODAY_PRIORITY,
        WAREHOUSE_POOL,
    )

    checks = [c for c in workload_checks if any(s.name == "cost_attributed" for s in c.check_specs)]
    assert checks
    for c in checks:
        assert c.op.pool == WAREHOUSE_POOL
        assert int(c.op.tags[PRIORITY_TAG]) > int(TODAY_PRIORITY[PRIORITY_TAG]) > int(BACKFILL_PRIORITY[PRIORITY_TAG])
