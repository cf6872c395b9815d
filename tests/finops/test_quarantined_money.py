"""Money never leaves unseen, and inputs as providers write them (issue 43 parts 3 and 4).

The GCP day of tests/fixtures/finops/clouds/gcp/ (invoice 2,704.90) rewritten as BigQuery's CSV
export writes a TIMESTAMP (`2026-11-28 00:00:00 UTC`; GCP's FOCUS export is a BigQuery view), with
the commitment's `Purchase` row and the `Tax` row missing ServiceCategory (a column FOCUS says is
never NULL) and one 100.00 usage row whose charge period ends before it starts. Every row with a
readable date loads; the three bad rows are quarantined with their money, and `cost report` (table
and JSON) and the reconciliation/chargeback partitions show it beside the totals, count it in
`difference` and call the day incomplete.
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, date, datetime
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.feeds import focus
from gpu_platform.finops.feeds.ingest import load_focus_day
from gpu_platform.finops.sqlmodels.report import model_metrics

GCP = Path(__file__).parent.parent / "fixtures" / "finops" / "clouds" / "gcp" / "focus-gcp-2026-11-28.csv"
DAY = "2026-11-28"
INVOICE = D("2704.90")
TIME_COLUMNS = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")


def bigquery_export(path: Path) -> dict[str, D]:
    """Write the GCP bill as a BigQuery CSV export would, with the three bad rows; return what
    those rows carry."""
    with GCP.open(newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    for r in rows:
        for c in TIME_COLUMNS:
            r[c] = datetime.fromisoformat(r[c]).strftime("%Y-%m-%d %H:%M:%S UTC")
        if r["ChargeCategory"] in ("Purchase", "Tax"):
            r["ServiceCategory"] = ""
    reversed_row = dict(rows[-1])
    reversed_row.update(BilledCost="100.00", EffectiveCost="100.00", ListCost="100.00", ContractedCost="100.00",
                        ChargeCategory="Usage", ChargePeriodStart="2026-11-28 10:00:00 UTC",
                        ChargePeriodEnd="2026-11-28 09:00:00 UTC", ServiceCategory="Compute")
    rows.append(reversed_row)
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path.write_text(out.getvalue())
    return {"billed": D("1692.48") + D("121.06") + D("100.00"), "effective": D("121.06") + D("100.00")}


@pytest.mark.parametrize("text", [
    "2026-11-20 00:00:00 UTC", "2026-11-20T00:00:00Z", "2026-11-20T00:00:00+00:00", "2026-11-20 05:30:00+05:30",
    "2026-11-20T05:30:00+0530", "2026-11-19T19:00:00-05:00", "2026-11-20T00:00:00.000Z", "2026-11-20 00:00:00",
])
def test_timestamps_as_providers_write_them_are_read_as_the_same_utc_instant(text):
    assert focus._parse_ts(text) == datetime(2026, 11, 20, tzinfo=UTC)


def test_an_unreadable_timestamp_or_an_empty_period_is_quarantined_with_its_row_and_money(tmp_path):
    path = tmp_path / "bill.csv"
    bad = bigquery_export(path)
    text = path.read_text().replace("2026-11-28 00:00:00 UTC", "28/11/2026 00:00", 1)
    path.write_text(text)
    batch = focus.load_focus(path)
    assert batch.rows_in == 149 and batch.quarantined == 4
    reasons = batch.quarantine["reason"].to_list()
    assert any("invalid timestamp '28/11/2026 00:00'" in r for r in reasons)
    (rev,) = [r for r in batch.quarantine.iter_rows(named=True) if "is not after ChargePeriodStart" in r["reason"]]
    assert rev["reason"].startswith(f"row {rev['source_row']}: column ChargePeriodEnd: 2026-11-28T09:00:00Z")
    assert rev["BilledCost"] == D("100") and rev["BillingCurrency"] == "USD"
    assert sum(batch.quarantine["BilledCost"].to_list(), D(0)) >= bad["billed"]


@pytest.fixture(scope="module")
def gcp_day(tmp_path_factory):
    home = tmp_path_factory.mktemp("bq")
    env = {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_WAREHOUSE": ""}
    bill = home / "focus-gcp-bigquery.csv"
    bad = bigquery_export(bill)
    runner = CliRunner()
    ingest = runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill), "--format", "json"], env=env)
    assert ingest.exit_code == 0, ingest.output
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    report = runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    table = runner.invoke(main, ["cost", "report", "--day", DAY], env=env)
    return {"ingest": json.loads(ingest.output), "build": build, "report": json.loads(report.stdout),
            "report_stderr": report.stderr, "table": table, "wh": home / "warehouse.duckdb", "bad": bad}


def test_bigquery_timestamps_load_every_row_on_its_day(gcp_day):
    (line,) = [r for r in gcp_day["ingest"]["feeds"] if r["feed"] == "focus"]
    assert (line["rows_in"], line["accepted"], line["quarantined"]) == (149, 146, 3), line


def test_quarantined_money_shows_beside_the_totals_and_the_day_is_incomplete(gcp_day):
    assert gcp_day["build"].exit_code == 0, gcp_day["build"].output
    rep = gcp_day["report"]
    (t,) = rep["totals"]
    bad = gcp_day["bad"]
    assert D(t["quarantined_billed"]) == bad["billed"] and D(t["quarantined_effective"]) == bad["effective"]
    # the invoice (and the reversed row) is what was read plus what was quarantined
    assert D(t["billed"]) + D(t["quarantined_billed"]) == INVOICE + D("100.00")
    assert D(t["difference"]) == bad["effective"]
    assert rep["incomplete"] and "3 FOCUS row(s) quarantined" in rep["incomplete"][0]
    assert "incomplete" in gcp_day["report_stderr"]
    by_reason = {(r["file"], r["reason"]): r for r in rep["quarantined"]}
    (fee,) = [r for (f, reason), r in by_reason.items() if "ServiceCategory" in reason and D(r["billed"]) > 1000]
    assert fee["file"].endswith("focus-gcp-bigquery.csv") and fee["currency"] == "USD" and fee["counted"]
    assert any("is not after ChargePeriodStart" in reason for _, reason in by_reason)


def test_the_table_report_and_the_partition_metadata_say_the_same(gcp_day):
    out = gcp_day["table"].output
    assert "Quarantined" in out and "quarantined_billed" in out and "incomplete" in out
    (t,) = gcp_day["report"]["totals"]
    with duckdb.connect(str(gcp_day["wh"]), read_only=True) as con:
        for model in ("reconciliation", "chargeback"):
            meta = model_metrics(con, model, (DAY, DAY))
            assert meta["incomplete"] == 1.0 and "ServiceCategory" in meta["quarantined_md"]
        meta = model_metrics(con, "reconciliation", (DAY, DAY))
    assert D(str(meta["quarantined_billed_cost_USD"])) == D(t["quarantined_billed"])
    assert D(str(meta["difference_USD"])).quantize(D("0.01")) == D(t["difference"]).quantize(D("0.01"))


def test_a_file_with_no_accepted_row_is_quarantined_under_the_day_it_was_loaded_for(tmp_path):
    feeds = tmp_path / "feeds"
    (feeds / "focus").mkdir(parents=True)
    path = feeds / "focus" / "late.csv"
    bigquery_export(path)
    # every date unreadable: no row says which day it charges
    text = path.read_text()
    for c in ("2026-11-28", "2026-11-29", "2026-11-01", "2026-12-01"):
        text = text.replace(c + " ", c.replace("-", "/") + " ")
    path.write_text(text)
    old = datetime(2026, 10, 3, tzinfo=UTC).timestamp()
    os.utime(path, (old, old))
    con = duckdb.connect()
    report = load_focus_day(con, feeds, date(2026, 11, 28))
    assert (report.rows_in, report.accepted, report.quarantined) == (149, 0, 149)
    days = con.execute("select distinct day from raw_focus_quarantine").fetchall()
    assert days == [(date(2026, 11, 28),)]
    (billed,) = con.execute("select sum(BilledCost) from raw_focus_quarantine").fetchone()
    assert billed == INVOICE + D("100.00")


def test_sub_micro_rows_sum_exactly_raw_equals_staged_equals_reported(tmp_path):
    """100,000 AWS-shaped data-transfer rows of 0.0000004 USD (one per hour slice and resource, as
    a per-request export writes tiny charges): billed 0.04 exactly, not 0, and the data test
    raw = staged = reported (1e-9) passes; the 0.04 below the pricing models' 1e-6 pieces shows as
    `rounding` and in `difference`."""
    with GCP.open(newline="") as f:
        header = next(csv.reader(f))
    aws = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill" / "focus-aws-2026-11-28.csv"
    with aws.open(newline="") as f:
        rows = list(csv.DictReader(f))
    (egress, *_) = [r for r in rows if r["ServiceSubcategory"] == "Network Traffic" or "transfer" in
                    r["ChargeDescription"].lower()]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(egress), lineterminator="\n")
    w.writeheader()
    for i in range(100_000):
        w.writerow({**egress, "BilledCost": "0.0000004", "EffectiveCost": "0.0000004", "ListCost": "0.0000004",
                    "ContractedCost": "0.0000004", "ResourceId": f"arn:aws:s3:::av-logs-{i:06d}",
                    "ChargePeriodStart": "2026-11-28T05:00:00Z", "ChargePeriodEnd": "2026-11-28T06:00:00Z"})
    assert header  # the clouds share FOCUS 1.2's columns
    bill = tmp_path / "focus-tiny.csv"
    bill.write_text(out.getvalue())
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    assert runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill)], env=env).exit_code == 0
    build = runner.invoke(main, ["cost", "build", "--day", DAY], env=env)
    assert build.exit_code == 0, build.output
    rep = json.loads(runner.invoke(main, ["cost", "report", "--day", DAY, "--format", "json"], env=env).stdout)
    (t,) = rep["totals"]
    assert D(t["billed"]) == D("0.04") and D(t["effective"]) == D("0.04")
    assert D(t["rounding"]) == D("0.04") and D(t["difference"]) == D("0.04")
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        ((raw, reported),) = con.execute("select raw_billed_cost, billed_cost from reconciliation where day = $d",
                                         {"d": date(2026, 11, 28)}).fetchall()
        (loaded,) = con.execute("select sum(BilledCost) from raw_focus_billing").fetchone()
    assert raw == reported == loaded == D("0.04")
