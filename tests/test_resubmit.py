"""The same request submitted again (docs/requests.md): while the recorded one is live it is
"already recorded" (same id, nothing written); once it ended, the submit says so in one line
(its id, state and end) and records nothing unless `--again`, which records the next run
(`<id>-run<n>`), itself idempotent while live. SQLite and PostgreSQL where `ledger_url` is used."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from assets.gate import submit_request
from assets.submit import EXAMPLE
from gpu_platform.cli import main
from gpu_platform.cli.demo import _load, live_request_files
from gpu_platform.requests.ledger import (
    PENDING_STATES,
    TERMINAL_STATES,
    Ledger,
    LedgerError,
    RequestEnded,
    content_request_id,
    run_request_id,
)
from gpu_platform.requests.model import validate_request, validate_request_file
from tests.conftest import EXAMPLES
from tests.gate.helpers import env  # noqa: F401  (the Launchpad's fixture)

RESEARCH = EXAMPLES / "research_best_effort.yaml"


def _write(dirpath: Path, name: str, **update) -> Path:
    raw = yaml.safe_load(RESEARCH.read_text())
    raw.update(update)
    path = dirpath / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _submit(url: str, *args: str | Path):
    return CliRunner().invoke(main, ["submit", *map(str, args), "--ledger", url], catch_exceptions=False)


def _end(ledger: Ledger, request_id: str, state: str = "finished") -> None:
    if state != "rejected":
        ledger.record(request_id, "admitted", "Admitted", flavor="a100-spot")
    ledger.record(request_id, state, "done" if state == "finished" else "Inadmissible: test")


def _queue(url: str) -> list[dict]:
    out = CliRunner().invoke(main, ["queue", "--format", "json", "--ledger", url], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_identical_content_while_live_is_the_same_request(tmp_path, ledger_url):
    f = _write(tmp_path, "r.yaml")
    first = _submit(ledger_url, f)
    rid = first.stdout.strip()
    ledger = Ledger(ledger_url)
    for live in ("admitted", "preempted", "requeued"):
        ledger.record(rid, live, "test")
        for flags in ([], ["--again"]):  # a live request is never recorded twice, asked again or not
            again = _submit(ledger_url, f, *flags)
            assert again.exit_code == 0, again.output
            assert again.stdout.strip() == rid
            assert f"already recorded as {rid} ({live})" in again.stderr
    assert ledger.count()[0] == 1


@pytest.mark.parametrize("state", TERMINAL_STATES)
def test_identical_content_after_it_ended_says_so_in_one_line_and_records_nothing(tmp_path, sqlite_url, state):
    f = _write(tmp_path, "r.yaml")
    rid = _submit(sqlite_url, f).stdout.strip()
    ledger = Ledger(sqlite_url)
    _end(ledger, rid, state)
    ended_at = ledger.state(rid).updated_at
    before = ledger.count()
    again = _submit(sqlite_url, f)
    assert again.exit_code == 3, again.output
    assert again.stdout == ""
    (line,) = again.stderr.strip().splitlines()
    assert line == (
        f"{f}: identical to {rid}, which {state} at {ended_at:%Y-%m-%d %H:%M:%S} UTC; nothing recorded; "
        f"to run it again: gpu-platform submit {f} --again (with the same --policy/--ledger)"
    )
    assert ledger.count() == before


def test_again_records_a_new_run_that_shows_in_the_queue_and_a_retry_of_it_adds_nothing(tmp_path, ledger_url):
    f = _write(tmp_path, "r.yaml")
    rid = _submit(ledger_url, f).stdout.strip()
    ledger = Ledger(ledger_url)
    _end(ledger, rid)
    again = _submit(ledger_url, f, "--again")
    assert again.exit_code == 0, again.output
    run2 = again.stdout.strip()
    assert run2 == f"{rid}-run2" == run_request_id(rid, 2)
    assert f"recorded again as {run2} (the same request as {rid}, which ended)" in again.stderr
    assert [r["request_id"] for r in _queue(ledger_url)] == [run2]
    assert ledger.state(run2).request.request_id == run2
    # the same `--again` retried (a lost terminal, a CI retry), and a plain submit: run2, once
    for flags in (["--again"], []):
        retry = _submit(ledger_url, f, *flags)
        assert retry.exit_code == 0 and retry.stdout.strip() == run2, retry.output
        assert f"already recorded as {run2} (submitted)" in retry.stderr
    assert ledger.count()[0] == 2
    # run2 ended too: a plain submit names run2; --again records run3
    _end(ledger, run2, "failed")
    assert f"identical to {run2}, which failed at" in _submit(ledger_url, f).stderr
    assert _submit(ledger_url, f, "--again").stdout.strip() == f"{rid}-run3"
    assert ledger.count()[0] == 3


def test_a_batch_with_an_ended_request_is_refused_whole_and_again_records_what_it_must(tmp_path, sqlite_url, policy):
    live, ended, new = (_write(tmp_path, f"{k}.yaml", experiment_id=f"exp-{k}") for k in ("live", "ended", "new"))
    live_id, ended_id = _submit(sqlite_url, live, ended).stdout.split()
    ledger = Ledger(sqlite_url)
    _end(ledger, ended_id)
    refused = _submit(sqlite_url, live, ended, new)
    assert refused.exit_code == 3, refused.output
    assert f"{ended}: identical to {ended_id}, which finished at" in refused.stderr
    assert f"gpu-platform submit {live} {ended} {new} --again" in refused.stderr
    assert "nothing of the batch was recorded" in refused.stderr
    assert ledger.count()[0] == 2
    done = _submit(sqlite_url, live, ended, new, "--again")
    assert done.exit_code == 0, done.output
    new_id = content_request_id(validate_request_file(new, policy))
    assert done.stdout.split() == [live_id, f"{ended_id}-run2", new_id]
    assert ledger.count()[0] == 4


def test_a_request_with_its_own_id_follows_the_same_rule(sqlite_url, policy):
    req = validate_request({**yaml.safe_load(RESEARCH.read_text()), "request_id": "exp17-trial-3"}, policy)
    ledger = Ledger(sqlite_url)
    assert ledger.submit(req) == "exp17-trial-3"
    assert ledger.submit(req) == "exp17-trial-3"
    _end(ledger, "exp17-trial-3")
    with pytest.raises(LedgerError, match=r"identical to exp17-trial-3, which finished at .*leave it empty"):
        ledger.submit(req)
    with pytest.raises(RequestEnded) as exc:
        ledger.submit_batch([req], sources=["trial-3.yaml"])
    ((source, sub),) = exc.value.ended
    assert (source, sub.request_id, sub.state) == ("trial-3.yaml", "exp17-trial-3", "finished")
    assert ledger.submit(req, again=True) == ledger.submit(req, again=True) == "exp17-trial-3-run2"
    assert ledger.count()[0] == 2
    assert run_request_id("x" * 200, 12) == "x" * 194 + "-run12"


def _again(url: str, barrier, results) -> None:
    from gpu_platform.policy import load_policy

    request = validate_request(yaml.safe_load(RESEARCH.read_text()), load_policy())
    request = request.model_copy(update={"request_id": content_request_id(request)})
    ledger = Ledger(url)
    barrier.wait(30)
    try:
        results.put(("ok", ledger.submit(request, again=True)))
    except Exception as exc:  # reported to the test, which names it
        results.put(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))


def test_concurrent_agains_record_one_new_run(ledger_url):
    """Four processes submit the same ended request with `again` at once: one run2, same id to all."""
    rid = _submit(ledger_url, RESEARCH).stdout.strip()
    ledger = Ledger(ledger_url)
    _end(ledger, rid)
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_again, args=(ledger_url, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert out == [("ok", f"{rid}-run2")] * 4
    assert ledger.count()[0] == 2


def test_on_the_demo_the_example_request_runs_again(tmp_path, policy):
    """The demo submits examples/requests/ itself, under the ids `gpu-platform submit` gives them;
    once its research request ended, the README's command records a new one, in the queue."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    ledger.submit_batch([_load(p, policy) for p in live_request_files()])  # as `demo seed` does
    demo_id = _load(RESEARCH, policy).request_id
    assert demo_id == content_request_id(validate_request_file(RESEARCH, policy))
    _end(ledger, demo_id)
    plain = _submit(url, RESEARCH)
    assert plain.exit_code == 3 and f"identical to {demo_id}, which finished" in plain.stderr
    again = _submit(url, RESEARCH, "--again")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == f"{demo_id}-run2"
    queued = {r["request_id"]: r["state"] for r in _queue(url)}
    assert queued[f"{demo_id}-run2"] in PENDING_STATES


def test_the_launchpad_follows_the_same_rule(env):  # noqa: F811
    instance, ledger, resources, _ = env
    res = {"ledger": resources["ledger"], "policy": resources["policy"]}
    config = {"ops": {"submit_request_op": {"config": {**EXAMPLE, "request_id": "lp-trial-1"}}}}
    first = submit_request.execute_in_process(run_config=config, resources=res, instance=instance)
    assert first.output_for_node("submit_request_op") == "lp-trial-1"
    _end(ledger, "lp-trial-1")
    ended = submit_request.execute_in_process(run_config=config, resources=res, instance=instance, raise_on_error=False)
    assert not ended.success
    failure = next(e for e in ended.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    error = failure.event_specific_data.error.to_string()
    assert "identical to lp-trial-1, which finished at" in error and "(the Launchpad: leave it empty)" in error
    # left empty (the Launchpad's default), a new random id: the job runs again
    fresh = submit_request.execute_in_process(resources=res, instance=instance)
    assert fresh.output_for_node("submit_request_op") not in ("lp-trial-1", "lp-trial-1-run2")
    assert ledger.count()[0] == 2
