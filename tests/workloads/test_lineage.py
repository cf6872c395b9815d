"""Lineage: parents resolved from request ids, the tree back from a release, its rendering, the
release-evidence checks as plain functions, and the `lineage` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from click.testing import CliRunner
from rich.console import Console

from gpu_platform.cli.lineage import lineage, retention
from gpu_platform.lineage.evidence import EvidenceStore
from gpu_platform.lineage.graph import (
    LineageStore,
    Parent,
    WorkloadRun,
    check_cost_attributed,
    check_lineage_complete,
    check_logs_retained,
    check_replay_coverage,
    check_reproducible,
    render_tree,
    resolve_parents,
)
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest, validate_request_file

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "requests"
CHAIN = EX / "release_chain"

FILES = {
    "req-label": EX / "labeler_batch.yaml",
    "req-train": EX / "candidate_train.yaml",
    "req-replay": EX / "release_eval.yaml",
    "req-map": EX / "map_semantic_batch.yaml",
    "req-replay-map": CHAIN / "replay_map.yaml",
    "req-pack": CHAIN / "evidence_pack.yaml",
    "req-release": CHAIN / "released_model.yaml",
    "req-release-map": CHAIN / "released_map.yaml",
}


def requests() -> dict[str, JobRequest]:
    policy = load_policy()
    return {
        rid: validate_request_file(path, policy).model_copy(update={"request_id": rid}) for rid, path in FILES.items()
    }


def test_resolve_parents_follows_output_artifact_ids():
    reqs = requests()
    parents, unresolved = resolve_parents(reqs["req-train"], reqs)
    assert parents == [Parent("req-label", "label_batch", "lbl-batch-2026-11-28")]
    assert set(unresolved) == {"calib-fleet-v9", "tax-perception-v12"}
    parents, _ = resolve_parents(reqs["req-release"], reqs.values())
    assert parents == [
        Parent("req-train", "training_run", "model-perception-2026.12-rc1"),
        Parent("req-replay", "replay", "replay-rel-2026.12-urban-day"),
    ]
    parents, _ = resolve_parents(reqs["req-release-map"], reqs)
    assert {p.kind for p in parents} == {"map_segmentation", "replay"}
    assert resolve_parents(reqs["req-label"], reqs)[0] == []


def _record_chain(store: LineageStore, reqs: dict[str, JobRequest], skip: str = "", suites=None) -> None:
    order = [("req-label", "label_batch"), ("req-train", "training_run"), ("req-replay", "replay")]
    for rid, kind in order:
        if rid == skip:
            continue
        parents, unresolved = resolve_parents(reqs[rid], reqs)
        store.record_edges(rid, kind, parents)
        results = {"suites": suites or {"eval-scenario-suite-v7": {"status": "passed", "pass_rate": 0.97}}} if kind == "replay" else {}
        store.record_run(
            WorkloadRun.for_request(
                reqs[rid], kind, "succeeded", log_digest=f"sha256:{rid[4:].ljust(64, '0')[:64]}", gpu_hours=1.5,
                unresolved_inputs=tuple(unresolved), results=results, exit_status=0,
            )
        )
    rid = "req-release"
    parents, unresolved = resolve_parents(reqs[rid], reqs)
    store.record_edges(rid, "evidence_pack", parents)
    store.record_run(WorkloadRun.for_request(reqs[rid], "evidence_pack", "succeeded", unresolved_inputs=tuple(unresolved), gpu_hours=0.0))
    store.record_edges(rid, "released_model", [Parent(rid, "evidence_pack", f"evidence-pack:{rid}")])
    store.record_run(WorkloadRun.for_request(reqs[rid], "released_model", "succeeded", gpu_hours=0.0))


def test_tree_walks_back_from_a_release_to_its_label_batch(tmp_path: Path):
    store = LineageStore(sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}"))
    reqs = requests()
    _record_chain(store, reqs)
    tree = store.tree("req-release")
    assert (tree.request_id, tree.kind) == ("req-release", "released_model")
    kinds = [(n.kind, n.request_id) for n in tree.unique()]
    assert kinds == [
        ("released_model", "req-release"),
        ("evidence_pack", "req-release"),
        ("training_run", "req-train"),
        ("label_batch", "req-label"),
        ("replay", "req-replay"),
    ]
    assert sum(1 for n in tree.walk() if n.repeat) == 1, "the model appears under the pack and the replay"
    console = Console(record=True, width=200)
    console.print(render_tree(tree))
    text = console.export_text()
    for needle in ("released_model req-release", "label_batch req-label", "ds-frames-2026-11", "commit=3f2c1a9b8e7d"):
        assert needle in text
    assert json.dumps(tree.to_dict())
    assert store.producer_of("model-perception-2026.12-rc1").request_id == "req-train"
    assert store.producer_of("release-perception-2026.12").kind == "released_model"
    assert store.producer_of("nope") is None


def test_checks_pass_on_a_complete_chain_and_name_what_is_missing(tmp_path: Path):
    store = LineageStore(sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}"))
    reqs = requests()
    _record_chain(store, reqs, skip="req-label", suites={"eval-scenario-suite-v7": {"status": "failed", "pass_rate": 0.5}})
    tree = store.tree("req-release", "evidence_pack")
    lc = check_lineage_complete(tree, reqs["req-release"])
    assert not lc.passed
    assert lc.missing == ("label_batch req-label (via lbl-batch-2026-11-28): not materialized",)
    rc = check_replay_coverage(tree, reqs["req-release"])
    assert not rc.passed and "suite eval-scenario-suite-v7 for ODD cell odd-urban-day: failed in replay req-replay" in rc.description
    night = reqs["req-release"].model_copy(update={"evaluator_ids": ("eval-scenario-suite-v7", "eval-night-v1")})
    rc = check_replay_coverage(tree, night)
    assert "suite eval-night-v1 for ODD cell odd-urban-day: not replayed" in rc.description
    assert check_reproducible(tree).passed
    # without the cost models no cost can be attributed: the check fails and says so
    unpriced = check_cost_attributed(tree, None)
    assert not unpriced.passed
    assert unpriced.missing == ("priced cost: the cost models have not been built, so no stage's cost can be attributed",)
    costed = check_cost_attributed(tree, costs={"req-train": 12.0})
    assert costed.missing == ("replay req-replay: no priced cost in the cost models",)
    assert check_cost_attributed(tree, costs={"req-train": 12.0, "req-replay": 3.0}).passed


def test_reproducibility_and_logs_checks_name_each_gap(tmp_path: Path):
    store = LineageStore(sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}"))
    ev = EvidenceStore(tmp_path / "ev")
    reqs = requests()
    train = reqs["req-train"].model_copy(update={"dataset_ids": ()})
    held = ev.put(b"train log", "req-train", "log", hold=True)
    unheld = ev.put(b"pack log", "req-pack", "log")
    store.record_run(WorkloadRun.for_request(train, "training_run", "succeeded", log_digest=held.digest, gpu_hours=None))
    store.record_edges("req-pack", "evidence_pack", [Parent("req-train", "training_run", "model-perception-2026.12-rc1")])
    store.record_run(WorkloadRun.for_request(reqs["req-pack"], "evidence_pack", "succeeded", log_digest=unheld.digest))
    tree = store.tree("req-pack")
    rep = check_reproducible(tree)
    assert rep.missing == ("training_run req-train: dataset snapshot (dataset_ids)",)
    logs = check_logs_retained(tree, ev.exists, ev.verify, ev.held_digests())
    assert logs.missing == (f"evidence_pack req-pack: log {unheld.digest} not under evidence hold",)
    cost = check_cost_attributed(tree, costs={"req-train": 1.0})
    assert cost.missing == ("training_run req-train: gpu_hours not recorded",)
    lc = check_lineage_complete(tree, reqs["req-pack"])
    assert "upstream replay or map_segmentation: none in the lineage of req-pack" in lc.description


def test_lineage_cli_prints_the_tree_by_request_or_artifact_id(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    reqs = requests()
    _record_chain(LineageStore(ledger.engine), reqs)
    runner = CliRunner()
    res = runner.invoke(lineage, ["req-release", "--ledger", url])
    assert res.exit_code == 0, res.output
    assert "label_batch req-label" in res.output
    res = runner.invoke(lineage, ["release-perception-2026.12", "--ledger", url, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["request_id"] == "req-release"
    res = runner.invoke(lineage, ["unknown-id", "--ledger", url])
    assert res.exit_code == 2 and "no recorded request or artifact" in res.output


def test_retention_cli_sweeps_and_holds(tmp_path: Path):
    from datetime import UTC, datetime, timedelta

    ev = EvidenceStore(tmp_path)
    old = datetime.now(UTC) - timedelta(days=1)
    a = ev.put(b"a", "req-a", "log", old)
    b = ev.put(b"b", "req-b", "log", old)
    runner = CliRunner()
    assert runner.invoke(retention, ["hold", "req-b", "--evidence-root", str(tmp_path), "--reason", "audit"]).exit_code == 0
    res = runner.invoke(retention, ["sweep", "--dry-run", "--evidence-root", str(tmp_path)])
    assert f"would delete {a.digest}" in res.output and f"kept {b.digest}: held" in res.output
    assert ev.exists(a.digest)
    res = runner.invoke(retention, ["sweep", "--evidence-root", str(tmp_path)])
    assert f"deleted {a.digest}" in res.output
    assert not ev.exists(a.digest) and ev.exists(b.digest)


def test_lineage_tables_share_the_ledger_database(ledger_url: str):
    """Same engine as the ledger, on SQLite and on the PostgreSQL that `make test` starts."""
    ledger = Ledger(ledger_url)
    store = LineageStore(ledger.engine)
    reqs = requests()
    _record_chain(store, reqs)
    _record_chain(store, reqs)  # a second attempt of every stage: edges replaced, runs appended
    tree = store.tree("req-release")
    assert len(tree.unique()) == 5
    assert store.attempts("req-train", "training_run") == 2
    assert store.latest_run("req-replay").results["suites"]["eval-scenario-suite-v7"]["status"] == "passed"
    assert {"lineage_edges", "workload_runs", "gp_requests"} <= set(sa.inspect(ledger.engine).get_table_names())
