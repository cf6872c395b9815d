"""The demo's history backfill reports its progress on the console, and every GraphQL document the
demo and `make ui-check` send is valid against the installed Dagster's own GraphQL schema (so a
renamed field fails here, not minutes into a UI check)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from dagster_graphql.schema import create_schema
from graphql import parse, validate

from gpu_platform.demo import supervisor
from gpu_platform.demo.supervisor import backfill_progress, follow_backfill

ROOT = Path(__file__).resolve().parents[2]


def _documents() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from scripts import ui_check

    docs = {f"supervisor.{n}": getattr(supervisor, n) for n in dir(supervisor)
            if n.isupper() and isinstance(getattr(supervisor, n), str) and "{" in getattr(supervisor, n)}
    docs.update({f"ui_check.{n}": getattr(ui_check, n) for n in dir(ui_check)
                 if n.isupper() and isinstance(getattr(ui_check, n), str) and getattr(ui_check, n).lstrip()[:1] in "{qm"
                 and "{" in getattr(ui_check, n)})
    return docs


def test_every_graphql_document_is_valid_against_dagsters_schema():
    schema = create_schema().graphql_schema
    docs = _documents()
    assert {"supervisor.BACKFILL_PROGRESS", "supervisor.LAUNCH_BACKFILL", "ui_check.QUEUE", "ui_check.PREEMPTED",
            "ui_check.RUN"} <= set(docs)
    problems = {name: [e.message for e in validate(schema, parse(doc))] for name, doc in docs.items()}
    assert {n: p for n, p in problems.items() if p} == {}


def _answers(*steps):
    """A fake GraphQL endpoint answering the progress query with each step in turn (then the last)."""
    calls = []

    def query(url, doc, variables):
        assert doc == supervisor.BACKFILL_PROGRESS and variables == {"id": "bf1"}
        status, done, failed = steps[min(len(calls), len(steps) - 1)]
        calls.append(1)
        return {"partitionBackfillOrError": {"__typename": "PartitionBackfill", "status": status, "assetBackfillData": {
            "assetBackfillStatuses": [
                {"__typename": "AssetPartitionsStatusCounts", "numPartitionsTargeted": 20,
                 "numPartitionsMaterialized": done, "numPartitionsFailed": failed},
                {"__typename": "UnpartitionedAssetStatus", "materialized": status == "COMPLETED", "failed": False},
            ]}}}

    return query


def test_progress_counts_partitions_and_unpartitioned_assets():
    assert backfill_progress("u", "bf1", _answers(("REQUESTED", 5, 1))) == ("REQUESTED", 5, 1, 21)
    assert backfill_progress("u", "bf1", _answers(("COMPLETED", 20, 0))) == ("COMPLETED", 21, 0, 21)


def test_follow_logs_when_it_moves_and_when_it_ends():
    lines: list[str] = []
    query = _answers(("REQUESTED", 0, 0), ("REQUESTED", 0, 0), ("REQUESTED", 7, 0), ("REQUESTED", 7, 0),
                     ("REQUESTED", 12, 1), ("COMPLETED", 20, 1))
    follow_backfill("u", "bf1", threading.Event(), lines.append, every=0.0, query=query)
    assert [line.split(" (")[0] for line in lines] == [
        "demo: history backfill 0/21 asset partitions priced",
        "demo: history backfill 7/21 asset partitions priced",
        "demo: history backfill 12/21 asset partitions priced, 1 failed",
        "demo: history backfill 21/21 asset partitions priced, 1 failed",
    ]
    assert lines[-1].endswith("; completed")


def test_follow_stops_when_the_demo_stops():
    stop = threading.Event()
    stop.set()
    lines: list[str] = []
    follow_backfill("u", "bf1", stop, lines.append, query=_answers(("REQUESTED", 0, 0)))
    assert lines == []
