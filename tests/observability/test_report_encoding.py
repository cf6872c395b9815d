"""`gpu-platform report` with hostile values in the warehouse (issue 24, class 2): the page holds
them as text only, and every plot file lands in the output directory under a safe name."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser

import duckdb
import pytest

from gpu_platform.observe.report import build_report
from gpu_platform.observe.report.build import safe_name
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request
from tests.gate.helpers import raw_request
from tests.observability.test_report import NOW, warehouse  # noqa: F401 (the built warehouse fixture)
from tests.sqlmodels.finops_scenario import DAY

XSS_CURRENCY = '"><IMG SRC=X ONERROR=alert(1)>'
XSS_TEAM = "<script>alert('team')</script>"
XSS_SIGNAL = '<img src=x onerror="alert(2)">'
XSS_REQUEST = "req-<b onmouseover=alert(3)>x</b>"
TRAVERSAL = "USD/../../escaped"
MATH = "$\\alpha^$"

# every element and attribute the template itself writes
TEMPLATE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "em", "img", "table", "tr",
                 "th", "td"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture
def hostile_warehouse(warehouse, tmp_path):  # noqa: F811
    copy = tmp_path / "wh.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    con = duckdb.connect(str(copy))
    for currency, team in ((XSS_CURRENCY, XSS_TEAM), (TRAVERSAL, MATH), ("USD", XSS_TEAM)):
        con.execute("insert into platform_cost_per_tenant (day, team, currency, total_cost, allocated_gpu_hours) "
                    "values (?, ?, ?, 12.5, 3.0)", [DAY, team, currency])
        con.execute("insert into unit_cost_training_run (currency, cost_per_training_run) values (?, 7.25)", [currency])
    con.execute("create or replace table capacity_signals "
                "(day date, signal varchar, subject varchar, fired boolean, action varchar)")
    con.execute("insert into capacity_signals values (?, 'queue_wait', ?, true, ?)", [NOW.date(), XSS_REQUEST, XSS_SIGNAL])
    con.close()
    return copy


@pytest.fixture
def ledger(tmp_path, policy):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    t0 = NOW - timedelta(days=1)
    # request ids are refused at submission unless they match the id pattern; a hostile one can
    # only reach the report through the warehouse (the signal's subject below)
    rid = led.submit(validate_request(raw_request("release_eval", output_artifact_ids=["e"]), policy), at=t0)
    led.record(rid, "admitted", "test", flavor="h100-ondemand", at=t0 + timedelta(minutes=5))
    return led


def test_hostile_values_are_text_and_plots_stay_in_the_output_directory(ledger, policy, hostile_warehouse, tmp_path):
    out = tmp_path / "parent" / "report"
    before = {p for p in tmp_path.rglob("*")}
    rep = build_report(ledger, policy, out, days=7, warehouse=hostile_warehouse, now=NOW)

    # no file written outside the output directory, every plot under a safe name
    written = {p for p in tmp_path.rglob("*")} - before
    assert all(p == out or out in p.parents or p in out.parents for p in written), written
    for png in rep.pngs:
        assert png.parent == out and re.fullmatch(r"[A-Za-z0-9_-]+\.png", png.name), png
    names = {p.name for p in rep.pngs}
    assert f"cost_by_team_{safe_name(XSS_CURRENCY)}.png" in names and f"unit_costs_{safe_name(TRAVERSAL)}.png" in names
    assert "cost_by_team_USD.png" in names  # a plain code keeps its plain name

    page = rep.html.read_text(encoding="utf-8")
    parsed = _Page()
    parsed.feed(page)
    tags = {t for t, _ in parsed.tags}
    assert tags <= TEMPLATE_TAGS, tags - TEMPLATE_TAGS
    assert "script" not in tags
    for tag, attrs in parsed.tags:
        assert not [a for a, _ in attrs if a.lower().startswith("on")], (tag, attrs)
        if tag == "img":
            (src,) = [v for a, v in attrs if a == "src"]
            assert (out / src).is_file() and re.fullmatch(r"[A-Za-z0-9_-]+\.png", src)
    text = "".join(parsed.text)
    for hostile in (XSS_CURRENCY, XSS_TEAM, XSS_SIGNAL, XSS_REQUEST, TRAVERSAL):
        assert hostile in text  # shown, as text
    assert [p for p in tmp_path.rglob("*escaped*") if p.parent != out] == []


def test_safe_name_is_injective_and_plain_codes_stay():
    assert safe_name("USD") == "USD" and safe_name("EUR") == "EUR"
    values = ["USD/x", "USD_x", "USD x", "USD\\x", "", "../USD", ".", "a" * 100, "a" * 101]
    names = [safe_name(v) for v in values]
    assert len(set(names)) == len(values)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", n) and len(n) <= 51 for n in names)


def test_the_template_autoescapes(tmp_path):
    from gpu_platform.observe.report.build import _environment

    env = _environment()
    assert env.autoescape is True or env.autoescape(None) or env.autoescape("index.html.j2")
    html = env.from_string("<p>{{ x }}</p>").render(x="<script>")
    assert html == "<p>&lt;script&gt;</p>"
