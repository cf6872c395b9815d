"""`gpu-platform cost export`: the day's allocation as FOCUS 1.2 rows that reconcile to the invoice.

Day 2026-11-28 of the whole bill (tests/finops/test_whole_bill.py: an AWS-shaped FOCUS 1.2 export
with on-demand, spot and Savings-Plan nodes, the plan's purchase and unused part, volumes, a CPU
node, tax, a credit, a team's bypass pods and a notebook nobody owns), built through the CLI. The
exported rows are read back through the project's own FOCUS loader (the ingest's rules: Mandatory
columns, non-null columns, types) and summed per currency.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.finops.export import ExportError, focus_export, split, validate_focus
from gpu_platform.finops.feeds.focus import load_focus
from tests.finops.test_quarantined_money import DAY as GCP_DAY
from tests.finops.test_quarantined_money import INVOICE as GCP_INVOICE
from tests.finops.test_quarantined_money import gcp_day  # noqa: F401  (a fixture)
from tests.finops.test_whole_bill import DAY, INVOICE, PREV, built  # noqa: F401  (the built day, a fixture)


def export(built, fmt: str, out: Path | None = None, day: str = DAY):  # noqa: F811
    args = ["cost", "export", "--day", day, "--format", fmt] + (["--out", str(out)] if out else [])
    return CliRunner().invoke(main, args, env=built["env"])


@pytest.fixture(scope="module")
def focus_file(built, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("export") / "focus-2026-11-28.csv"
    res = export(built, "focus", out)
    assert res.exit_code == 0, res.output
    return out


def sums(rows, billed="BilledCost", effective="EffectiveCost", currency="BillingCurrency"):
    out: dict[str, list[D]] = {}
    for r in rows:
        t = out.setdefault(r[currency], [D(0), D(0)])
        t[0] += D(str(r[billed]))
        t[1] += D(str(r[effective]))
    return out


def test_the_export_reconciles_to_the_invoice_to_the_cent(built, focus_file):  # noqa: F811
    rows = list(csv.DictReader(focus_file.open()))
    (usd,) = built["reports"][DAY]["totals"]
    assert sums(rows) == {"USD": [D(usd["billed"]), D(usd["effective"])]}
    # the day and the correction's day together: the invoice, to the cent
    prev = list(csv.DictReader(io.StringIO(export(built, "focus", day=PREV).stdout)))
    assert sums(rows)["USD"][0] + sums(prev)["USD"][0] == INVOICE
    assert sums(rows)["USD"][1] + sums(prev)["USD"][1] == INVOICE


def test_the_export_loads_through_the_focus_loader_with_nothing_quarantined(focus_file):
    batch = load_focus(focus_file, currency=None)
    assert batch.quarantine.height == 0, batch.quarantine.to_dicts()[:3]
    frame = batch.rows
    assert frame.height == len(list(csv.DictReader(focus_file.open())))
    assert set(frame["focus_version"].to_list()) == {"1.2"}
    assert frame["BilledCost"].sum() == frame["EffectiveCost"].sum()  # this day: billed = effective


def test_effective_cost_is_split_per_request_with_its_parts_in_x_columns(built, focus_file):  # noqa: F811
    rows = list(csv.DictReader(focus_file.open()))
    by_request = {r["x_RequestId"]: r for r in rows if r["x_AllocationLine"] == "request"}
    assert set(by_request) == {"req-train-1", "req-label-1", "req-replay-1"}
    parts = ("x_AllocatedCost", "x_CpuCost", "x_StorageCost", "x_IdleCost", "x_SharedCost", "x_TaxCost",
             "x_CreditCost", "x_UnusedCommitmentCost", "x_UnreconciledCost")
    for r in rows:
        if r["ChargeCategory"] == "Usage":
            assert sum(D(r[p]) for p in parts) == D(r["EffectiveCost"]), r
    # the direct cost is the request's own (fct_gpu_cost_by_request)
    assert D(by_request["req-replay-1"]["x_AllocatedCost"]) == D("732")
    assert D(by_request["req-train-1"]["x_AllocatedCost"]) == D("1179.84")
    # a team's request rows and team rows add up to its chargeback total, each part exactly
    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        cb = dict(con.execute("select team, sum(total_cost) from chargeback where day = $d group by team",
                              {"d": DAY}).fetchall())
        (release,) = con.execute("select count(*) from stg_requests where release_packet_id is not null").fetchone()
    by_team: dict[str, D] = {}
    for r in rows:
        if r["ChargeCategory"] == "Usage":
            by_team[r["x_Team"]] = by_team.get(r["x_Team"], D(0)) + D(r["EffectiveCost"])
    assert by_team == cb
    tags = json.loads(by_request["req-train-1"]["Tags"])
    assert tags == {"team": "perception", "cost_center": "CC-1010", "lane": "candidate_train",
                    "request": "req-train-1"}
    assert release == 0 and "release" not in tags
    bypass = [r for r in rows if r["x_AllocationLine"] == "bypass"]
    assert [(r["x_Team"], D(r["x_AllocatedCost"]), r["x_Bypass"]) for r in bypass] == [
        ("perception", D("1191.9"), "true")]
    lines = {r["x_AllocationLine"] for r in rows}
    assert {"unused_commitment", "unreconciled"} <= lines


def test_the_rows_pass_the_focus_column_rules_and_a_broken_row_is_named(built):  # noqa: F811
    with duckdb.connect(str(built["wh"]), read_only=True) as con:
        ex = focus_export(con, DAY)
    assert validate_focus(ex.rows) == []
    assert ex.totals == {"USD": ex.expected["USD"]}
    broken = [dict(r) for r in ex.rows[:2]]
    broken[0]["BillingAccountId"] = None
    broken[0]["ChargeCategory"] = "Usage-ish"
    broken[1]["ChargePeriodStart"] = datetime(2026, 11, 28, 12, tzinfo=UTC)
    broken[1]["ChargePeriodEnd"] = datetime(2026, 11, 28, 12, tzinfo=UTC)
    broken[1]["EffectiveCost"] = 1.5
    broken[1]["team"] = "x"
    del broken[1]["ServiceName"]
    problems = validate_focus(broken)
    assert "row 1: column BillingAccountId: NULL in a column that allows none" in problems
    assert "row 1: column ChargeCategory: 'Usage-ish' is not an allowed value" in problems
    assert any(p.startswith("row 2: column ChargePeriodEnd:") for p in problems)
    assert "row 2: column EffectiveCost: 1.5 is not a finite decimal" in problems
    assert "row 2: column ServiceName: Mandatory column missing" in problems
    assert "row 2: column team: a custom column must start with x_" in problems


def test_parquet_and_csv_carry_the_same_money(built, tmp_path):  # noqa: F811
    (usd,) = built["reports"][DAY]["totals"]
    res = export(built, "parquet", tmp_path / "day.parquet")
    assert res.exit_code == 0, res.output
    table = pq.read_table(tmp_path / "day.parquet").to_pylist()
    assert sums(table) == {"USD": [D(usd["billed"]), D(usd["effective"])]}
    assert all(r["ChargePeriodStart"] == datetime(2026, 11, 28, tzinfo=UTC) for r in table)
    batch = load_focus(tmp_path / "day.parquet", currency=None)
    assert batch.quarantine.height == 0
    plain = list(csv.DictReader(io.StringIO(export(built, "csv").stdout)))
    assert sums(plain, "billed_cost", "effective_cost", "currency") == {"USD": [D(usd["billed"]), D(usd["effective"])]}
    assert {r["day"] for r in plain} == {DAY}


def test_a_day_not_built_is_a_clear_error(built, tmp_path):  # noqa: F811
    res = export(built, "focus", day="2026-11-20")
    assert res.exit_code == 2
    assert "2026-11-20 is not built" in res.output and "cost build --day 2026-11-20" in res.output
    res = CliRunner().invoke(main, ["cost", "export", "--day", DAY, "--warehouse", str(tmp_path / "none.duckdb")])
    assert res.exit_code == 2 and "is not built" in res.output
    with duckdb.connect() as con, pytest.raises(ExportError, match="not built"):
        focus_export(con, date(2026, 11, 28))


def test_split_adds_up_exactly_and_follows_the_weights():
    assert split(D("1.000000"), [D(1), D(1), D(1)]) == [D("0.333334"), D("0.333333"), D("0.333333")]
    assert sum(split(D("-400"), [D("1179.84"), D("471.96"), D("732")])) == D("-400")
    assert split(D("10"), [D(0), D(0)]) == [D("5"), D("5")]
    assert split(D("0.000003"), [D(3), D(1)]) == [D("0.000002"), D("0.000001")]


def test_quarantined_money_has_its_own_line_and_the_export_still_reconciles(gcp_day, tmp_path):  # noqa: F811
    """The GCP day with three quarantined rows (tests/finops/test_quarantined_money.py): the export
    adds up to what was read plus what was quarantined, i.e. the invoice and the reversed row."""
    out = tmp_path / "gcp.csv"
    res = CliRunner().invoke(main, ["cost", "export", "--day", GCP_DAY, "--out", str(out)],
                             env={"GPU_PLATFORM_HOME": str(gcp_day["wh"].parent), "GPU_PLATFORM_WAREHOUSE": ""})
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    (t,) = gcp_day["report"]["totals"]
    billed, effective = sums(rows)["USD"]
    assert billed == D(t["billed"]) + D(t["quarantined_billed"]) == GCP_INVOICE + D("100.00")
    assert effective == D(t["effective"]) + D(t["quarantined_effective"])
    (q,) = [r for r in rows if r["x_AllocationLine"] == "quarantined"]
    assert (D(q["BilledCost"]), D(q["EffectiveCost"])) == (gcp_day["bad"]["billed"], gcp_day["bad"]["effective"])
    assert q["ChargeCategory"] == "Adjustment" and q["x_Team"] == ""
    # the commitment's covered usage is billed 0 at an amortized EffectiveCost while its fee row is
    # quarantined: billed and effective differ, and one line says by how much
    assert D(t["billed"]) != D(t["effective"])
    (bme,) = [r for r in rows if r["x_AllocationLine"] == "billed_minus_effective"]
    assert (D(bme["BilledCost"]), D(bme["EffectiveCost"])) == (D(t["billed"]) - D(t["effective"]), 0)
    assert load_focus(out, currency=None).quarantine.height == 0


def test_sub_micro_money_reaches_the_export_on_the_rounding_line(tmp_path):
    """20,000 data-transfer rows of 0.0000004 USD: each priced piece rounds to 0, the day's exact
    billed is 0.008; the export's rounding line carries it, so its rows add up to 0.008 exactly."""
    aws = Path(__file__).parent.parent / "fixtures" / "finops" / "whole-bill" / "focus-aws-2026-11-28.csv"
    with aws.open(newline="") as f:
        rows = list(csv.DictReader(f))
    (egress, *_) = [r for r in rows if "transfer" in r["ChargeDescription"].lower()]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(egress), lineterminator="\n")
    w.writeheader()
    for i in range(20_000):
        w.writerow({**egress, "BilledCost": "0.0000004", "EffectiveCost": "0.0000004", "ListCost": "0.0000004",
                    "ContractedCost": "0.0000004", "ResourceId": f"arn:aws:s3:::av-logs-{i:06d}",
                    "ChargePeriodStart": "2026-11-28T05:00:00Z", "ChargePeriodEnd": "2026-11-28T06:00:00Z"})
    bill = tmp_path / "focus-tiny.csv"
    bill.write_text(out.getvalue())
    env = {"GPU_PLATFORM_HOME": str(tmp_path), "GPU_PLATFORM_WAREHOUSE": ""}
    runner = CliRunner()
    assert runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill)], env=env).exit_code == 0
    assert runner.invoke(main, ["cost", "build", "--day", DAY], env=env).exit_code == 0
    res = runner.invoke(main, ["cost", "export", "--day", DAY], env=env)
    assert res.exit_code == 0, res.output
    exported = list(csv.DictReader(io.StringIO(res.stdout)))
    assert sums(exported) == {"USD": [D("0.008"), D("0.008")]}
    (rounding,) = [r for r in exported if r["x_AllocationLine"] == "rounding"]
    assert D(rounding["EffectiveCost"]) > D("0.005")
    assert "WARNING" not in res.stderr
    # feeds loaded after the build: the export still writes the built figures, and says they are stale
    assert runner.invoke(main, ["feeds", "ingest", "--day", DAY, "--focus", str(bill)], env=env).exit_code == 0
    again = runner.invoke(main, ["cost", "export", "--day", DAY, "--out", str(tmp_path / "x.csv")], env=env)
    assert again.exit_code == 0, again.output
    assert f"WARNING: the figures for {DAY} are stale" in again.stderr and "cost build --day" in again.stderr
