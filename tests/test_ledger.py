"""The request ledger on SQLite and on the real PostgreSQL that `make test` starts."""

import multiprocessing as mp

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger, LedgerError
from gpu_platform.requests.model import validate_request
from tests.conftest import EXAMPLES


def _req(lane="research_best_effort", **update):
    raw = yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())
    raw.update(update)
    return validate_request(raw, load_policy())


def test_submit_and_events_are_append_only(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(_req())
    ledger.record(rid, "waiting", "Inadmissible: lane full", details={"position": 2, "of": 3})
    ledger.record(rid, "admitted", "QuotaReserved", flavor="a100-spot", run_id="run-1")
    ledger.record(rid, "preempted", "InCohortReclamation by req-x")
    ledger.record(rid, "requeued", "resumes from checkpoint")
    ledger.record(rid, "admitted", "QuotaReserved", flavor="a100-spot", run_id="run-2")
    state = ledger.state(rid)
    assert state.state == "admitted"
    assert state.attempts == 2
    assert state.run_id == "run-2"
    assert [e.event for e in ledger.events(rid)] == ["submitted", "waiting", "admitted", "preempted", "requeued", "admitted"]
    assert ledger.events(rid)[1].details == {"position": 2, "of": 3}
    assert ledger.count() == (1, 6)
    assert ledger.get(rid).request_id == rid


def test_states_keep_submission_order_and_filter(ledger_url):
    ledger = Ledger(ledger_url)
    ids = [ledger.submit(_req()) for _ in range(3)]
    ledger.record(ids[1], "admitted", flavor="a100-spot")
    assert [s.request_id for s in ledger.states()] == ids
    assert [s.request_id for s in ledger.states(["submitted"])] == [ids[0], ids[2]]
    assert [s.request_id for s in ledger.states(lane="release_eval")] == []


def test_unknown_event_and_request_are_refused(ledger_url):
    ledger = Ledger(ledger_url)
    rid = ledger.submit(_req())
    with pytest.raises(LedgerError, match="unknown event 'launched'"):
        ledger.record(rid, "launched")
    with pytest.raises(LedgerError, match="unknown request id"):
        ledger.record("req-missing", "admitted")
    with pytest.raises(LedgerError, match="unknown request id"):
        ledger.get("req-missing")


def test_resubmitting_same_id_is_idempotent_and_conflicts_are_refused(ledger_url):
    ledger = Ledger(ledger_url)
    req = _req(request_id="req-fixed-1")
    assert ledger.submit(req) == "req-fixed-1"
    assert ledger.submit(req) == "req-fixed-1"
    assert ledger.count() == (1, 1)
    with pytest.raises(LedgerError, match="different content"):
        ledger.submit(_req(request_id="req-fixed-1", gpu_count=2))


def _submitter(url: str, worker: int, n: int, queue) -> None:
    ledger = Ledger(url)
    ids = []
    for i in range(n):
        ids.append(ledger.submit(_req(experiment_id=f"exp-{worker}-{i}")))
        ids.append(ledger.submit(_req(request_id="req-shared", experiment_id="exp-shared")))
    queue.put(ids)


def test_concurrent_submitters_never_lose_or_duplicate(ledger_url):
    Ledger(ledger_url)  # create tables once, as the platform does on start
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    workers, per_worker = 4, 15
    procs = [ctx.Process(target=_submitter, args=(ledger_url, w, per_worker, queue)) for w in range(workers)]
    for p in procs:
        p.start()
    returned = [rid for _ in procs for rid in queue.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    unique = {r for r in returned if r != "req-shared"}
    assert len(unique) == workers * per_worker
    ledger = Ledger(ledger_url)
    states = ledger.states()
    assert len(states) == workers * per_worker + 1
    assert {s.request_id for s in states} == unique | {"req-shared"}
    assert sorted(s.request.experiment_id for s in states if s.request_id != "req-shared") == sorted(
        f"exp-{w}-{i}" for w in range(workers) for i in range(per_worker)
    )


def test_cli_submit_and_queue(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    runner = CliRunner()
    result = runner.invoke(main, ["submit", "--ledger", url, str(EXAMPLES / "release_eval.yaml"), str(EXAMPLES / "labeler_batch.yaml")])
    assert result.exit_code == 0, result.output
    ids = result.output.split()
    assert len(ids) == 2 and all(i.startswith("req-") for i in ids)
    result = runner.invoke(main, ["queue", "--ledger", url, "--format", "json"])
    assert result.exit_code == 0
    assert '"lane": "release_eval"' in result.output and '"state": "submitted"' in result.output


def test_cli_submit_records_nothing_when_any_file_is_invalid(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("lane: release_eval\n")
    result = CliRunner().invoke(main, ["submit", "--ledger", url, str(EXAMPLES / "release_eval.yaml"), str(bad)])
    assert result.exit_code == 2
    assert "release_packet_id: required by lane release_eval" in result.output
    assert Ledger(url).count() == (0, 0)


def test_an_unmatched_observation_names_what_it_lacks(tmp_path) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    row = {"namespace": "team-a", "job": "j", "request_id": "req-x", "attempt": 1, "kind": "unknown_request",
           "why": "not submitted", "condition": "Admitted", "status": "True"}
    with pytest.raises(LedgerError, match="kind 'other' is not one of unknown_request"):
        led.record_unmatched([{**row, "kind": "other"}])
    with pytest.raises(LedgerError, match="unmatched observation 1: missing job, why"):
        led.record_unmatched([row, {**row, "job": None, "why": None}])
    assert led.unmatched() == []  # nothing of a refused batch is written
    assert led.record_unmatched([row]) == 1
    assert led.last_unmatched()[("team-a", "j")]["request_id"] == "req-x"
