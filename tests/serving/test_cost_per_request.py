"""Cost per 1,000 inference requests, to the cent, on the hand-computed day of finops_scenario.

The service `perception-serving` (request S1, 1 GPU per replica) runs on gpu-b (A100, price book
1.844 USD per GPU-hour; GPUs 6 and 7, which no batch pod uses):

  replica r1  GPU 6  00:00-24:00 (still running)   24 GPU-h  busy 50 %  used 12   idle 12
  replica r2  GPU 7  08:00-20:00 (scaled down)     12 GPU-h  busy 25 %  used  3   idle  9
  allocated 36 GPU-h x 1.844 = 66.384 USD; idle 21 GPU-h x 1.844 = 38.724 USD

Requests (tests/fixtures/serving/requests-2026-11-28.json, loaded twice under two names): the
28th's windows hold 96 x 1,000 + 144 x 3,000 + 48 x 1,000 = 576,000 requests (the 00:00 point of
the 28th, 777, counts the 27th). Cost per 1,000 requests = 66.384 / 576 = 0.11525 USD; idle part
38.724 / 576 = 0.067229 USD. `map-tiles` has 22.5 requests and no GPU time: no figure, a reason.
"""

from __future__ import annotations

import shutil
from datetime import date, datetime
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest

from gpu_platform.finops.feeds.requests_prom import load_service_requests_day
from gpu_platform.finops.sqlmodels import (
    Project,
    default_project_path,
    ensure_raw_tables,
    load_ledger_snapshot,
)
from gpu_platform.finops.sqlmodels.report import cost_report
from tests.sqlmodels.finops_scenario import (
    DAY,
    PODS,
    REQUESTS,
    billing_rows,
    h,
    insert_billing,
    insert_samples,
    pod_dicts,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
PRICE_B = D("1.844")
ALLOCATED = 36 * PRICE_B  # 66.384
IDLE = 21 * PRICE_B  # 38.724
REQUESTS_28 = 96 * 1000 + 144 * 3000 + 48 * 1000  # 576,000

SERVICE = dict(request_id="S1", team="perception", cost_center="CC-1010", lane="online_serving", site="sf",
               workload="service", gpu_type="a100", gpu_count=1, state="admitted", attempts=1,
               service_name="perception-serving")
# (namespace, pod, request, attempt, flavor, node, gpus, start h, end h, exit, engine-active busy, util %)
SERVICE_PODS = [
    ("team-perception", "S1-a1-r1", "S1", 1, "a100-spot", "gpu-b", [6], 0, 24, None, None, 50),
    ("team-perception", "S1-a1-r2", "S1", 1, "a100-spot", "gpu-b", [7], 8, 20, "Succeeded", None, 25),
]


def _service_pods() -> list[dict]:
    return [dict(namespace=ns, pod=pod, request_id=req, attempt=att, flavor_name=flv, hostname=node,
                 gpu_uuids=[f"GPU-{node}-{g}" for g in gpus], started_at=h(s),
                 ended_at=None if ex is None else h(e), exit_status=ex)
            for ns, pod, req, att, flv, node, gpus, s, e, ex, _, _ in SERVICE_PODS]


def build_day(tmp: Path) -> duckdb.DuckDBPyConnection:
    """The scenario's day plus the service, its request counts loaded from `tmp/feeds`, priced into
    `tmp/w.duckdb` with every data test passing; the open connection."""
    c = duckdb.connect(str(tmp / "w.duckdb"))
    ensure_raw_tables(c)
    load_ledger_snapshot(c, [*REQUESTS, SERVICE], [*pod_dicts(), *_service_pods()])
    insert_billing(c, billing_rows())
    insert_samples(c, pods=[*PODS, *SERVICE_PODS])
    folder = tmp / "feeds" / "requests" / DAY
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "requests-2026-11-28.json", folder / "perception.json")
    shutil.copy(FIXTURES / "requests-2026-11-28.json", folder / "perception-again.json")  # counted once
    shutil.copy(FIXTURES / "requests-mixed-2026-11-28.json", folder / "mixed.json")
    report = load_service_requests_day(c, tmp / "feeds", date.fromisoformat(DAY))
    assert report.rows_in == report.accepted + report.quarantined == 289 * 2 + 11
    project = Project.load(default_project_path())
    project.build(c, day=DAY)
    failures = {f"{t.model}.{t.test_name}": t.failures for t in project.run_tests(c, DAY)}
    assert {k: v for k, v in failures.items() if v} == {}
    return c


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = build_day(tmp_path_factory.mktemp("serving"))
    yield c
    c.close()


def row(con, service: str) -> dict:
    cur = con.execute("select * from unit_cost_inference_request where day = $d and service = $s",
                      {"d": date.fromisoformat(DAY), "s": service})
    rows = cur.fetchall()
    assert len(rows) == 1, rows
    return dict(zip([d[0] for d in cur.description], rows[0], strict=True))


def test_cost_per_1000_requests_to_the_cent(con):
    r = row(con, "perception-serving")
    assert r["currency"] == "USD" and r["team"] == "perception" and r["request_ids"] == ["S1"]
    assert r["replica_pods"] == 2 and r["replica_hours"] == pytest.approx(36.0)
    assert r["allocated_gpu_hours"] == pytest.approx(36.0)
    assert r["used_gpu_hours"] == pytest.approx(15.0) and r["idle_gpu_hours"] == pytest.approx(21.0)
    assert r["allocated_cost"] == ALLOCATED and r["idle_cost"] == IDLE
    assert r["requests"] == REQUESTS_28 and r["request_points"] == 288
    assert r["cost_per_1k_requests"] == D("0.115250")  # 66.384 / 576
    assert r["cost_per_1k_requests"].quantize(D("0.01")) == D("0.12")
    assert r["idle_cost_per_1k_requests"] == (IDLE / 576).quantize(D("0.000001"))  # 0.067229
    assert r["reason"] is None


def test_requests_without_gpu_time_have_a_reason_not_a_figure(con):
    r = row(con, "map-tiles")
    assert r["requests"] == 22.5 and r["currency"] is None and r["cost_per_1k_requests"] is None
    assert "no replica GPU time" in r["reason"]


def test_the_service_is_charged_to_its_team_like_any_pod(con):
    (cost,) = con.execute("select sum(allocated_cost) from fct_gpu_cost_by_request where request_id = 'S1'").fetchone()
    assert cost == ALLOCATED


def test_cost_report_shows_each_service(con):
    report = cost_report(con, DAY)
    services = {s["service"]: s for s in report["services"]}
    s = services["perception-serving"]
    assert (s["currency"], s["allocated_cost"], s["idle_cost"], s["requests"]) == ("USD", ALLOCATED, IDLE, REQUESTS_28)
    assert s["cost_per_1k_requests"] == D("0.115250")
    assert services["map-tiles"]["cost_per_1k_requests"] is None


def test_a_point_of_the_next_day_at_midnight_counts_this_day_and_not_the_next(con):
    (n,) = con.execute("select count(*) from stg_service_requests where service = 'perception-serving' "
                       "and ts = $t", {"t": datetime(2026, 11, 29)}).fetchone()
    assert n == 1
    (day,) = con.execute("select day from stg_service_requests where service = 'perception-serving' "
                         "and ts = $t", {"t": datetime(2026, 11, 29)}).fetchone()
    assert day == date(2026, 11, 28)


def test_the_asset_metadata_shows_what_cost_report_says(con):
    from gpu_platform.finops.sqlmodels.report import day_model_metrics

    meta = day_model_metrics(con, "unit_cost_inference_request", (DAY, DAY))[DAY]
    assert meta["cost_per_1k_requests_perception-serving_USD"] == float(cost_report(con, DAY)["services"][0]["cost_per_1k_requests"])
    table = meta["services_md"].replace("\\", "")  # markdown escapes (`0\.1` is not a list item)
    assert "| perception-serving |" in table and "| 0.115250 | 0.067229 |" in table
    assert "| 576,000 |" in table and "None" not in table


def test_cost_report_table_shows_the_service_whole_at_80_columns(tmp_path):
    from click.testing import CliRunner

    from gpu_platform.cli import main
    from tests.cli.test_tables import _assert_reads

    build_day(tmp_path).close()
    args = ["cost", "report", "--day", DAY, "--warehouse", str(tmp_path / "w.duckdb")]
    for width in (80, 140):
        res = CliRunner().invoke(main, [*args, "--format", "table"], env={"COLUMNS": str(width)}, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        _assert_reads(res.output, width)
        flat = res.output.replace("\n", "")
        assert "Inference services" in flat and "0.115250" in res.output
    import json

    res = CliRunner().invoke(main, [*args, "--format", "json"], catch_exceptions=False)
    services = {s["service"]: s for s in json.loads(res.output)["services"]}
    assert services["perception-serving"]["cost_per_1k_requests"] == "0.115250"
    assert services["map-tiles"]["reason"].startswith("requests counted but no replica GPU time")
