"""Kueue's decisions read back into the ledger, from recorded v1beta2 Workloads.

The objects in tests/fixtures/kueue-workloads/ are what `kubectl get jobs|workloads|events -o
json` prints (shape source in its README). `read_cluster` talks to them through the real
`kubernetes` client over HTTP (`fake_apiserver`, a recorded-response server).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from kubernetes import client

from gpu_platform.cli import main
from gpu_platform.cluster.readback import ledger_rows, observe, read_cluster
from gpu_platform.requests.ledger import Ledger
from tests.k8s.fake_apiserver import FILES, recorded, serve, submit_recorded

NAMESPACES = ("team-perception", "team-platform", "team-safety")
def _observations():
    jobs, wls, evs = [], [], []
    for ns in NAMESPACES:
        jobs += recorded("jobs", ns)
        wls += recorded("workloads", ns)
        evs += recorded("events", ns)
    return {o.request_id: o for o in observe(jobs, wls, evs)}


def test_each_workload_condition_becomes_an_observation() -> None:
    obs = _observations()
    assert set(obs) == set(FILES)
    admitted = obs["req-20261201-a1b2c3d4e5"]
    assert (admitted.condition, admitted.status, admitted.flavor) == ("Admitted", "True", "h100-ondemand")
    assert admitted.cluster_queue == "release-eval"
    pending = obs["req-20261201-9f8e7d6c5b"]
    assert (pending.condition, pending.status, pending.kueue_reason) == ("QuotaReserved", "False", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100-ondemand" in pending.message
    assert pending.flavor is None
    finished = obs["req-20261201-0c1d2e3f4a"]
    assert (finished.condition, finished.kueue_reason, finished.flavor) == ("Finished", "Succeeded", "l4-inference")
    preempted = obs["req-20261201-5a6b7c8d9e"]
    assert (preempted.condition, preempted.kueue_reason, preempted.attempt) == ("Preempted", "InCohortReclamation", 2)
    assert preempted.message.startswith("Preempted to accommodate a workload")
    no_wl = obs["req-20261201-77aa88bb99"]
    assert (no_wl.condition, no_wl.kueue_reason, no_wl.workload) == ("NoWorkload", "WorkloadPriorityClassNotFound", None)
    assert no_wl.message == 'WorkloadPriorityClass "candidate-train" not found'
    moved = obs["req-20261201-3c4d5e6f70"]
    assert (moved.flavor, moved.gate_flavor) == ("a100-spot", "h100-ondemand")
    assert "Kueue assigned a100-spot; the gate had chosen h100-ondemand" in moved.summary


def test_read_cluster_uses_the_kubernetes_client_namespace_by_namespace() -> None:
    with serve() as (url, seen):
        api = client.ApiClient(client.Configuration(host=url))
        found = read_cluster(
            NAMESPACES, client.BatchV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)
        )
    assert {o.request_id for o in found} == set(FILES)
    assert any("/namespaces/team-safety/workloads" in p for p in seen)
    # Events are read only for the Job Kueue made no Workload for.
    assert [p for p in seen if "/events" in p] == [
        next(p for p in seen if "/events" in p and "team-perception" in p)
    ]


@pytest.fixture
def ledger(tmp_path, policy):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    submit_recorded(led, policy)
    return led


def test_observations_become_ledger_events_once_and_do_not_change_state(ledger) -> None:
    obs = list(_observations().values())
    rows = ledger_rows(ledger.states(), obs)
    assert len(rows) == 6
    ledger.record_many(rows)
    assert ledger_rows(ledger.states(), obs) == [], "an unchanged observation is not recorded twice"
    states = {s.request_id: s for s in ledger.states()}
    assert all(s.state == "admitted" for s in states.values())
    assert states["req-20261201-5a6b7c8d9e"].cluster["kueue_reason"] == "InCohortReclamation"
    assert states["req-20261201-3c4d5e6f70"].cluster_flavor == "a100-spot"
    assert states["req-20261201-9f8e7d6c5b"].cluster_flavor is None
    events = ledger.events("req-20261201-77aa88bb99")
    assert events[-1].event == "cluster"
    assert events[-1].details["kueue_reason"] == "WorkloadPriorityClassNotFound"
    assert 'WorkloadPriorityClass "candidate-train" not found' in events[-1].reason


def test_an_observation_of_a_superseded_attempt_is_not_recorded(ledger) -> None:
    ledger.record("req-20261201-a1b2c3d4e5", "admitted", "again", flavor="h100-ondemand")
    obs = [o for o in _observations().values() if o.request_id == "req-20261201-a1b2c3d4e5"]
    assert ledger_rows(ledger.states(), obs) == []


def test_a_job_ahead_of_the_ledgers_attempt_is_named_as_such(ledger) -> None:
    """A Job of attempt 2 while the ledger records one launch: not a superseded attempt (that is
    an earlier one, being deleted) but one the ledger has no launch of."""
    from dataclasses import replace

    from gpu_platform.cluster.readback import read_back

    obs = _observations()
    rid = "req-20261201-a1b2c3d4e5"
    ahead = replace(obs[rid], attempt=2, job="ahead-job")
    behind_rid = "req-20261201-5a6b7c8d9e"  # admitted twice; a Job of its first attempt lingers
    behind = replace(obs[behind_rid], attempt=1, job="old-job")
    rb = read_back(ledger, [ahead, behind])
    kinds = {o.job: (kind, why) for o, kind, why in rb.unmatched}
    assert kinds == {
        "ahead-job": (
            "ahead_attempt",
            "attempt 2 is ahead of the ledger, whose current attempt of the request is 1: "
            "the ledger records no launch of this Job",
        ),
        "old-job": ("superseded_attempt", "attempt 1; the request's current attempt is 2"),
    }
    assert ledger_rows(ledger.states(), [ahead]) == []  # never recorded as the request's own state


def test_queue_shows_what_the_cluster_did(ledger) -> None:
    ledger.record_many(ledger_rows(ledger.states(), list(_observations().values())))
    result = CliRunner().invoke(main, ["queue", "--ledger", ledger.url, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["request_id"]: r for r in json.loads(result.output)}
    assert rows["req-20261201-77aa88bb99"]["cluster"]["kueue_reason"] == "WorkloadPriorityClassNotFound"
    assert rows["req-20261201-5a6b7c8d9e"]["cluster"]["condition"] == "Preempted"
    assert rows["req-20261201-a1b2c3d4e5"]["state"] == "admitted"
    table = CliRunner().invoke(main, ["queue", "--ledger", ledger.url])
    assert "WorkloadPriorityClassNotFound" in table.output


def test_jobs_the_ledger_cannot_match_are_recorded_as_such_once_per_change(ledger) -> None:
    from dataclasses import replace

    from gpu_platform.cluster.readback import read_back, record_read_back

    obs = _observations()
    finished = "req-20261201-0c1d2e3f4a"
    ledger.record(finished, "finished", "done")  # its Job is still on the cluster
    stray = replace(obs["req-20261201-9f8e7d6c5b"], request_id="req-made-by-hand", job="hand-made")
    seen = [*obs.values(), stray]
    rb = read_back(ledger, seen)
    kinds = {o.request_id: (kind, why) for o, kind, why in rb.unmatched}
    assert kinds == {
        finished: ("ended_request", "the request is finished in the ledger; its Job is still on the cluster"),
        "req-made-by-hand": ("unknown_request", "no request with this id in the ledger (not submitted through the gate)"),
    }
    assert len(rb.unmatched_new) == 2 and len(rb.changed) == len(FILES) - 1
    record_read_back(ledger, rb)
    rows = {r["request_id"]: r for r in ledger.unmatched()}
    assert rows["req-made-by-hand"]["job"] == "hand-made"
    assert rows["req-made-by-hand"]["message"] == stray.message and rows[finished]["condition"] == "Finished"

    again = read_back(ledger, seen)
    assert again.unmatched_new == [] and again.changed == [], "an unchanged story is not written again"
    moved = replace(stray, condition="Admitted", status="True", kueue_reason="Admitted", message="", flavor="h100-ondemand")
    later = read_back(ledger, [*obs.values(), moved])
    assert [(r["request_id"], r["condition"], r["flavor"]) for r in later.unmatched_new] == [
        ("req-made-by-hand", "Admitted", "h100-ondemand")
    ]
    import duckdb

    from gpu_platform.finops.snapshot import unmatched_snapshot
    from gpu_platform.finops.sqlmodels.raw import load_unmatched_snapshot

    record_read_back(ledger, later)
    con = duckdb.connect()
    assert load_unmatched_snapshot(con, unmatched_snapshot(ledger)) == 3  # what the bypass scorecard reads
    assert con.execute(
        "select request_id, kind, condition from raw_cluster_unmatched order by observed_at, request_id"
    ).fetchall() == [
        (finished, "ended_request", "Finished"),
        ("req-made-by-hand", "unknown_request", "QuotaReserved"),
        ("req-made-by-hand", "unknown_request", "Admitted"),
    ]
