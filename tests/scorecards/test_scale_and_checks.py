"""The scale ladder in request validation and `policy check`; the ledger's events in the snapshot;
capacity signals as Dagster asset checks with WARN / ERROR severity."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb
import pytest
from click.testing import CliRunner

from assets.finops import finops_assets
from gpu_platform.cli import main
from gpu_platform.finops.snapshot import scorecard_snapshot
from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
from gpu_platform.lineage.graph import LineageStore, WorkloadRun
from gpu_platform.observe.scorecards import SIGNALS
from gpu_platform.policy import PolicyError, parse_policy
from gpu_platform.policy.loading import default_policy_path
from gpu_platform.policy.scale import LEVELS, SCALES, required_metadata, scorecard_rows
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import RequestError, load_request_file, validate_request
from gpu_platform.safeload import POLICY_LIMITS, load_document
from resources.warehouse import Warehouse
from tests.conftest import EXAMPLES, FIXTURES
from tests.scorecards import scenario


def _raw_policy(**changes):
    raw = load_document(default_policy_path(), POLICY_LIMITS)
    raw.update(changes)
    return raw


def _without_site(scale: str):
    raw = _raw_policy(scale=scale)
    raw["common_required_fields"] = [f for f in raw["common_required_fields"] if f != "site"]
    return parse_policy(raw)


def test_ladder_is_cumulative_and_covers_every_row():
    assert [lv.name for lv in LEVELS] == list(SCALES) == ["S0", "S1", "S2", "S3", "S4", "S5"]
    for lower, upper in zip(SCALES, SCALES[1:], strict=False):
        assert set(required_metadata(lower)) <= set(required_metadata(upper))
        assert set(scorecard_rows(lower)) <= set(scorecard_rows(upper))
    assert len(scorecard_rows("S5")) == 9


def test_missing_metadata_fails_closed_from_s4_naming_field_and_scale():
    raw = load_request_file(EXAMPLES / "research_best_effort.yaml")
    raw.pop("site")
    assert validate_request(raw, _without_site("S3")).site is None  # below S4: expected, not enforced
    with pytest.raises(RequestError) as err:
        validate_request(raw, _without_site("S4"))
    assert err.value.errors == ["site: required at scale S4 (policy `scale`; missing metadata fails closed from S4)"]
    with pytest.raises(RequestError) as err:
        validate_request({k: v for k, v in raw.items() if k != "container_digest"}, _without_site("S5"))
    assert sorted(e.split(":")[0] for e in err.value.errors) == ["container_digest", "site"]


def test_policy_scale_and_thresholds_are_validated():
    with pytest.raises(PolicyError) as err:
        parse_policy(_raw_policy(scale="S9", capacity_signals={"pool_utilization_min": 2, "release_lane": "nope"}))
    text = "\n".join(err.value.errors)
    assert "scale:" in text and "capacity_signals.pool_utilization_min" in text
    assert "capacity_signals.release_lane: unknown lane 'nope'" in text


def test_policy_check_prints_what_the_scale_turns_on(tmp_path):
    res = CliRunner().invoke(main, ["policy", "check"])
    assert res.exit_code == 0, res.output
    assert "S4: release evidence" in res.output and "fails closed" in res.output
    assert "lanes release_eval, incident_response" in res.output
    path = tmp_path / "s1.yaml"
    path.write_text(json.dumps(_raw_policy(scale="S1"), default=str))
    res = CliRunner().invoke(main, ["policy", "check", str(path)])
    assert res.exit_code == 0, res.output
    assert "not enforced below S4" in res.output
    assert "preemption_impact" in res.output.split("scorecard rows off")[1]


def test_snapshot_carries_events_metadata_and_runs(sqlite_url, policy, tmp_path):
    ledger = Ledger(sqlite_url)
    lineage = LineageStore(ledger.engine)
    req = validate_request(load_request_file(EXAMPLES / "candidate_train.yaml"), policy).model_copy(
        update={"request_id": "R1"})
    t0 = datetime(2026, 11, 28, 1, tzinfo=UTC)
    ledger.submit(req, at=t0)
    ledger.record("R1", "preempted", "Preempted", details={"by": "X", "checkpoint_at": "2026-11-28T01:30:00"},
                  at=t0 + timedelta(hours=1))
    lineage.record_run(WorkloadRun.for_request(req, "training_run", "failed", exit_status=137))
    events, metadata, runs = scorecard_snapshot(ledger, lineage)
    assert [(e["seq"], e["event"]) for e in events] == [(1, "submitted"), (2, "preempted")]
    assert events[1]["event_at"] == datetime(2026, 11, 28, 2) and json.loads(events[1]["details"])["by"] == "X"
    assert metadata[0]["owner"] == req.owner and metadata[0]["container_digest"] == req.container_digest
    assert runs[0]["exit_status"] == 137
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert load_scorecard_snapshot(con, events, metadata, runs) == (2, 1, 1)
    assert con.execute("select count(*) from raw_request_events").fetchone() == (2,)
    con.close()


def test_signals_are_asset_checks_with_warn_and_error(tmp_path):
    path = str(tmp_path / "warehouse.duckdb")
    with duckdb.connect(path) as con:
        scenario.load(con)
    result = dg.materialize(finops_assets, partition_key=scenario.DAY, resources={"warehouse": Warehouse(path=path)})
    assert result.success
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()
             if e.asset_key == dg.AssetKey(["capacity_signals"])}
    assert set(evals) >= {s.name for s in SIGNALS}
    release = evals["release_replay_delayed_by_research"]
    assert (release.passed, release.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert release.description.startswith("release_eval waited up to 3600 s")
    pool = evals["pool_utilization_low"]
    assert (pool.passed, pool.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert "Node pool training did work on 9%" in pool.description
    assert evals["incident_waiting_for_capacity"].passed  # 240 s < 300 s
    assert evals["whole_gpu_fits_slice"].metadata["fired"].value == 1
    # the data tests of the scorecard marts all pass
    data = [e for e in result.get_asset_check_evaluations() if e.check_name not in {s.name for s in SIGNALS}]
    assert [e.check_name for e in data if not e.passed] == []


def test_approvals_granted_in_the_ledger_count_in_the_bypass_scorecard(sqlite_url, policy, tmp_path):
    from gpu_platform.finops.snapshot import ledger_snapshot
    from gpu_platform.finops.sqlmodels import Project, default_project_path, load_ledger_snapshot
    from gpu_platform.observe.scorecards import model_vars
    from gpu_platform.requests.approvals import grant

    ledger = Ledger(sqlite_url)
    t0 = datetime(2026, 11, 28, 1, tzinfo=UTC)
    for rid in ("R1", "R2"):
        req = validate_request(load_request_file(EXAMPLES / "release_eval.yaml"), policy).model_copy(
            update={"request_id": rid})
        ledger.submit(req, at=t0)
    grant(ledger, policy, "R1", role="safety-owner", kind="safety", reason="replay before the release",
          approver="safety-owner@example.com")
    grant(ledger, policy, "R2", role="finops", kind="cost", reason="over budget", approver="finops-lead@example.com")
    grant(ledger, policy, "R2", role="platform-lead", kind="safety", reason="preempt research",
          approver="platform-lead@example.com")
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_ledger_snapshot(con, *ledger_snapshot(ledger, policy))
    load_scorecard_snapshot(con, *scorecard_snapshot(ledger))
    today = datetime.now(UTC).date()  # grant() records now; the day before too, should midnight pass meanwhile
    Project.load(default_project_path()).build(con, days=(today - timedelta(days=1), today),
                                               select=["+scorecard_bypass"], variables=model_vars(policy))
    row = con.execute("select sum(approved_exceptions), sum(safety_approvals), sum(cost_exceptions) "
                      "from scorecard_bypass").fetchone()
    assert row == (3, 2, 1)
    con.close()


def test_framebuffer_use_from_dcgm_exporter_text(tmp_path):
    """stg_dcgm_memory on dcgm-exporter's own output (--use-old-namespace labels), through the real loader."""
    import os
    import shutil
    from datetime import date

    from gpu_platform.finops.feeds.ingest import load_dcgm_day
    from gpu_platform.finops.sqlmodels import Project, default_project_path, ensure_raw_tables
    from gpu_platform.observe.scorecards import model_vars

    day = date(2024, 9, 18)
    target = tmp_path / "feeds" / "dcgm" / day.isoformat() / "scrape.prom"
    target.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "feeds" / "dcgm-variant-old-namespace.txt", target)
    noon = datetime(2024, 9, 18, 12, tzinfo=UTC).timestamp()
    os.utime(target, (noon, noon))  # lines without a timestamp take the file's time
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    ensure_raw_tables(con)
    load_dcgm_day(con, tmp_path / "feeds", day, [])
    Project.load(default_project_path()).build(con, day=day, select=["stg_dcgm_memory"],
                                               variables=model_vars(parse_policy(_raw_policy())))
    rows = con.execute("select hostname, gpu, namespace, pod, fb_used_max_mib, fb_samples from stg_dcgm_memory "
                       "where fb_samples > 0").fetchall()
    assert ("gpu-node-02", 1, "team-labeling", "label-batch-7-0", 40536.0, 1) in rows
    con.close()
