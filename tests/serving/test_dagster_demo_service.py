"""The demo's service: seeded with the history on the serving nodes no batch job uses, replicas
following its diurnal request curve in the ledger and in the cluster feeds, request counts saved
as Prometheus answers up to now and never ahead of it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from gpu_platform.cli.demo import SERVICE_EXAMPLE, live_request_files
from gpu_platform.demo import history as demo_history
from gpu_platform.demo.serving import EXAMPLE, SERVICE_ID, add_service, qps_at
from gpu_platform.finops.feeds.requests_prom import read_service_requests_file
from gpu_platform.finops.snapshot import ledger_snapshot
from gpu_platform.observe.serving.replicas import service_views
from gpu_platform.requests.ledger import Ledger

DAYS = [date(2026, 11, 26), date(2026, 11, 27)]
NOW = datetime(2026, 11, 28, 9, 2, tzinfo=UTC)


def test_the_curve_is_diurnal():
    assert round(qps_at(datetime(2026, 1, 1, 3, tzinfo=UTC))) == 35
    assert round(qps_at(datetime(2026, 1, 1, 15, tzinfo=UTC))) == 200


def test_the_demo_service_runs_with_the_history(tmp_path, sqlite_url, policy):
    history = demo_history.generate(policy, DAYS)
    ledger = Ledger(sqlite_url)
    out = add_service(history, ledger, policy, tmp_path / "feeds", now=NOW)
    assert out["service"] == "perception-serving" and out["replica_changes"] > 0
    # replicas: ceil(QPS / 40) in [2, 6]: 2 at night (35 QPS), 5 at the 15:00 peak (200 QPS)
    changes = [(e.at, e.details["replicas"]) for e in ledger.events(SERVICE_ID) if e.event == "replicas"]
    peak = max(n for _, n in changes)
    assert peak == 5 and min(n for _, n in changes) == 2
    view = service_views(ledger)[0]
    assert (view.request_id, view.current_replicas) == (SERVICE_ID, changes[-1][1])
    # the pods: the ledger's replica pods and the history's, on serving nodes no batch pod uses
    _, pods = ledger_snapshot(ledger, policy)
    replica_pods = [p for p in pods if p["request_id"] == SERVICE_ID]
    job = next(j for j in history.jobs if j.request_id == SERVICE_ID)
    assert len(replica_pods) == len(job.segments) + sum(p["started_at"] >= datetime(2026, 11, 28) for p in replica_pods)
    serving = {node for seg in job.segments for node, _ in seg.placement}
    batch = {node for j in history.jobs if j.request_id != SERVICE_ID for seg in j.segments for node, _ in seg.placement}
    assert serving and not serving & batch
    day = DAYS[-1]
    pod_names = {p["metadata"]["name"] for p in demo_history.pods_doc(history, day, policy)["items"]
                 if p["metadata"]["labels"]["gpu-platform.io/request-id"] == SERVICE_ID}
    node = next(n for n in history.nodes if n.name in serving)
    import numpy as np

    frame = demo_history.dcgm_frame(history, node, day, policy, np.random.default_rng(0))
    assert pod_names and set(frame["pod"].drop_nulls().unique()) <= pod_names
    # request counts: every day up to now, today's last point at or before now
    today = read_service_requests_file(tmp_path / "feeds" / "requests" / "2026-11-28" / "prometheus.json", "p")
    assert today.quarantined == 0 and today.rows["ts"].max() <= NOW
    assert today.rows["ts"].max() > NOW - timedelta(minutes=5)
    whole = read_service_requests_file(tmp_path / "feeds" / "requests" / "2026-11-27" / "prometheus.json", "p")
    assert whole.accepted == 288 and 0.9 < whole.rows["requests"].sum() / (86400 * 117.5) < 1.1  # mean QPS 117.5


def test_the_demo_seeds_its_service_not_a_second_live_one():
    assert SERVICE_EXAMPLE == EXAMPLE
    assert all(p.name != EXAMPLE for p in live_request_files())


def test_a_history_that_leaves_no_serving_gpus_free_skips_the_service_and_says_why(tmp_path, sqlite_url, policy):
    history = demo_history.generate(policy, DAYS)
    for node in history.nodes:  # every L4 GPU held by a batch pod at some point
        if node.flavor == "l4-inference":
            history.jobs[0].segments[0].placement.append((node.name, tuple(range(node.gpus))))
    ledger = Ledger(sqlite_url)
    out = add_service(history, ledger, policy, tmp_path / "feeds", now=NOW)
    assert out["skipped"].startswith("0 l4-inference GPU(s) free all along")
    assert ledger.count()[0] == 0 and not (tmp_path / "feeds").exists()
