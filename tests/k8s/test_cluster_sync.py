"""`gpu-platform cluster sync`: the read-back on demand, over TLS with a private CA."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from tests.k8s.fake_apiserver import (
    EXAMPLES,
    FILES,
    serve,
    server_tls,
    submit_recorded,
    tls_files,
    write_kubeconfig,
)


@pytest.fixture
def ledger(tmp_path, policy):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    submit_recorded(led, policy)
    return led


def test_sync_records_what_changed_once_and_names_jobs_it_cannot_match(tmp_path, ledger) -> None:
    ca, cert, key = tls_files(tmp_path)
    # a newer attempt of one request: its recorded Job (attempt 1) is superseded, not dropped silently
    ledger.record("req-20261201-a1b2c3d4e5", "admitted", "again", flavor="h100-ondemand")
    with serve(tls=server_tls(cert, key)) as (url, _seen):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", url, ca=ca))
        args = ["cluster", "sync", "--ledger", ledger.url, "--kubeconfig", kubeconfig]
        dry = CliRunner().invoke(main, [*args, "--dry-run", "--format", "json"])
        assert dry.exit_code == 0, dry.output
        report = json.loads(dry.output)
        assert report["observed"] == len(FILES) and report["recorded"] is False
        assert len(report["changed"]) == len(FILES) - 1
        assert [e for e in ledger.events() if e.event == "cluster"] == []  # a dry run records nothing
        assert ledger.unmatched() == [] and report["unmatched_recorded"] == 0
        (skipped,) = report["unmatched"]
        assert skipped["request_id"] == "req-20261201-a1b2c3d4e5"
        assert skipped["kind"] == "superseded_attempt"
        assert skipped["why"] == "attempt 1; the request's current attempt is 2"

        first = CliRunner().invoke(main, args)
        assert first.exit_code == 0, first.output
        n_ns = len(report["namespaces"])
        assert f"{len(FILES)} Job(s) observed in {n_ns} namespace(s); recorded {len(FILES) - 1} change(s)" in first.output
        assert "WorkloadPriorityClassNotFound" in first.output
        assert "1 Job(s) not matched to a request of the ledger (recorded 1 new observation(s)" in first.output
        assert "(request req-20261201-a1b2c3d4e5, superseded_attempt): attempt 1; the request's current attempt is 2" in first.output
        assert len([e for e in ledger.events() if e.event == "cluster"]) == len(FILES) - 1
        (row,) = ledger.unmatched()  # recorded as such, for the bypass scorecard
        assert (row["request_id"], row["attempt"], row["kind"]) == ("req-20261201-a1b2c3d4e5", 1, "superseded_attempt")
        assert row["job"] == skipped["job"] and row["condition"]

        again = CliRunner().invoke(main, args)
        assert "recorded 0 change(s)" in again.output
        assert "recorded 0 new observation(s)" in again.output
        assert len([e for e in ledger.events() if e.event == "cluster"]) == len(FILES) - 1
        assert len(ledger.unmatched()) == 1  # the same story is not written twice


def test_sync_names_a_job_ahead_of_the_ledger_as_such(tmp_path, policy) -> None:
    """A request the ledger records as submitted but never launched, whose attempt-1 Job is on
    the cluster (a launch the ledger lost): `ahead_attempt`, not `superseded_attempt`."""
    rid = "req-20261201-77aa88bb99"
    fresh = Ledger(f"sqlite:///{tmp_path / 'fresh.db'}")
    name = FILES[rid][0]
    fresh.submit(validate_request_file(EXAMPLES / name, policy).model_copy(update={"request_id": rid}))
    ca, cert, key = tls_files(tmp_path)
    with serve(tls=server_tls(cert, key)) as (url, _seen):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", url, ca=ca))
        args = ["cluster", "sync", "--ledger", fresh.url, "--kubeconfig", kubeconfig]
        result = CliRunner().invoke(main, [*args, "--dry-run", "--format", "json"])
        assert result.exit_code == 0, result.output
        mine = [u for u in json.loads(result.output)["unmatched"] if u["request_id"] == rid]
        assert [(u["kind"], u["why"]) for u in mine] == [
            (
                "ahead_attempt",
                "attempt 1 is ahead of the ledger, whose current attempt of the request is 0: "
                "the ledger records no launch of this Job",
            )
        ]
        text = CliRunner().invoke(main, args)
        assert f"(request {rid}, ahead_attempt): attempt 1 is ahead of the ledger" in text.output
        assert "superseded" not in text.output
        (row,) = [r for r in fresh.unmatched() if r["request_id"] == rid]
        assert row["kind"] == "ahead_attempt"


def test_sync_says_in_one_line_when_the_cluster_is_refused(tmp_path, ledger) -> None:
    _ca, cert, key = tls_files(tmp_path)
    with serve(tls=server_tls(cert, key)) as (url, _seen):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", url))  # no CA: verification fails
        result = CliRunner().invoke(main, ["cluster", "sync", "--ledger", ledger.url, "--kubeconfig", kubeconfig])
    assert result.exit_code == 1
    assert "could not read the cluster back: MaxRetryError" in result.output
    assert "Traceback" not in result.output
