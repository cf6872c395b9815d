"""Lineage no one can hijack (issue 42, class 6): an output artifact id is its first claimant's
team's; another team's request naming it is refused at submit with the owner named; lineage
edges come only from producers that finished, one per input id."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml

from gpu_platform.demo import history as demo_history
from gpu_platform.lineage.graph import LineageStore, WorkloadRun, finished_requests, resolve_parents
from gpu_platform.requests.claims import claim_of
from gpu_platform.requests.ledger import BatchConflict, Ledger, LedgerError
from gpu_platform.requests.model import validate_request

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "requests"


def _raw(name: str = "candidate_train.yaml", **update) -> dict:
    raw = yaml.safe_load((EXAMPLES / name).read_text())
    raw.pop("request_id", None)
    raw.update(update)
    return raw


def _other_team(policy, raw: dict) -> dict:
    """The same request (same outputs) from another team that may run it."""
    for name, team in policy.teams.items():
        if name == raw["team"]:
            continue
        other = {**raw, "team": name, "cost_center": team.cost_center, "owner": "mallory@example.com",
                 "candidate_id": "cand-mallory"}
        try:
            validate_request(other, policy)
        except ValueError:
            continue
        return other
    raise AssertionError("the default policy lets no other team run this lane: the claim test needs one")


def test_another_team_cannot_claim_an_artifact_id(ledger_url, policy) -> None:
    led = Ledger(ledger_url)
    first = validate_request(_raw(), policy)
    rid = led.submit(first)
    hijack = validate_request(_other_team(policy, _raw()), policy)
    with pytest.raises(LedgerError) as exc:
        led.submit(hijack)
    text = str(exc.value)
    assert "model-perception-2026.12-rc1" in text and f"team {first.team}" in text
    assert rid in text and first.owner in text
    assert len(led.states()) == 1  # nothing of the refused request recorded
    with led.engine.connect() as conn:
        assert claim_of(conn, "model-perception-2026.12-rc1") == (first.team, rid, first.owner)


def test_the_same_team_may_run_it_again(ledger_url, policy) -> None:
    led = Ledger(ledger_url)
    led.submit(validate_request(_raw(), policy))
    again = validate_request(_raw(owner="lee@example.com", candidate_id="cand-rerun"), policy)
    assert led.submit(again)
    assert len(led.states()) == 2


def test_a_batch_of_two_teams_racing_for_one_id_records_nothing(tmp_path, policy) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    a = validate_request(_raw(), policy)
    b = validate_request(_other_team(policy, _raw()), policy)
    with pytest.raises(BatchConflict) as exc:
        led.submit_batch([a, b], sources=["a.yaml", "b.yaml"])
    assert exc.value.conflicts[0][0] == "b.yaml"
    assert led.states() == []


def test_demo_history_ids_are_claimed_and_the_live_examples_do_not_collide(tmp_path, policy) -> None:
    """The history writer records requests straight into the ledger (no claim): they are claimed
    when the next submission reads them back, and every example the live demo submits still
    records; another team cannot take over a history artifact."""
    days = [date(2026, 11, 20) + timedelta(days=i) for i in range(3)]
    hist = demo_history.generate(policy, days)
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    demo_history.write_ledger(hist, led, policy)
    paths = [*sorted(EXAMPLES.glob("*.yaml")), *sorted((EXAMPLES / "release_chain").glob("*.yaml")),
             *sorted((ROOT / "examples" / "demo").glob("*.yaml"))]
    reqs = [validate_request(yaml.safe_load(p.read_text()), policy, source=str(p)) for p in paths]
    led.submit_batch(reqs, sources=[str(p) for p in paths])
    produced = [(j.request, j.request.output_artifact_ids[0]) for j in hist.jobs if j.request.output_artifact_ids]
    req, artifact = produced[0]
    with led.engine.connect() as conn:
        assert claim_of(conn, artifact)[0] == req.team
    other = next(t for t in policy.teams if t != req.team)
    hijack = req.model_copy(update={"request_id": None, "team": other, "cost_center": policy.teams[other].cost_center})
    with pytest.raises(LedgerError, match=f"belongs to team {req.team}"):
        led.submit(hijack)


def test_edges_only_from_finished_producers_one_per_input(tmp_path, policy) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    store = LineageStore(led.engine)
    train = validate_request(_raw(), policy)
    rerun = validate_request(_raw(candidate_id="cand-rerun"), policy)
    t1, t2 = led.submit(train), led.submit(rerun)
    replay = validate_request(_raw("candidate_train.yaml"), policy).model_copy(update={"request_id": "req-replay", "artifact_set": ("model-perception-2026.12-rc1",)})
    reqs = {s.request_id: s.request.model_copy(update={"request_id": s.request_id}) for s in led.states()}
    reqs["req-replay"] = replay

    # nothing finished: no edge, the id is unresolved (not two parents)
    parents, unresolved = resolve_parents(replay, reqs, finished_requests(store.latest_runs()))
    assert parents == [] and "model-perception-2026.12-rc1" in unresolved

    # one that ended failed is the parent (the lineage check names its failure); t2 never ran
    store.record_run(WorkloadRun.for_request(reqs[t1], "training_run", "failed"))
    parents, _ = resolve_parents(replay, reqs, finished_requests(store.latest_runs()))
    assert [p.request_id for p in parents] == [t1]
    # of several that ended, the one that succeeded
    store.record_run(WorkloadRun.for_request(reqs[t2], "training_run", "succeeded"))
    parents, unresolved = resolve_parents(replay, reqs, finished_requests(store.latest_runs()))
    assert [(p.request_id, p.via_id) for p in parents] == [(t2, "model-perception-2026.12-rc1")]
    assert "model-perception-2026.12-rc1" not in unresolved

    # without the finished filter (the demo's history): still exactly one parent per input id
    parents, _ = resolve_parents(replay, reqs)
    assert [p.request_id for p in parents] == [t2]
