"""The demo's generated history: pushed through the admission engine, consistent across feeds."""

from __future__ import annotations

import json
from datetime import date, timedelta

import numpy as np
import pytest

from gpu_platform.demo import history as demo_history
from gpu_platform.finops.feeds.k8s_inventory import parse_nodes, parse_pods, provider_key
from gpu_platform.policy import load_policy
from gpu_platform.requests.model import validate_request

DAYS = [date(2026, 11, 1) + timedelta(days=n) for n in range(8)]


@pytest.fixture(scope="module")
def policy():
    return load_policy(None)


@pytest.fixture(scope="module")
def history(policy):
    return demo_history.generate(policy, DAYS)


def test_every_lane_runs_and_the_story_has_its_ingredients(history):
    s = demo_history.summary(history)
    assert set(s["lanes"]) == {"incident_response", "release_eval", "map_semantic_batch", "candidate_train",
                               "platform_maintenance", "labeler_batch", "baseline_rebuild", "research_best_effort"}
    total = lambda key: sum(x[key] for x in s["lanes"].values())  # noqa: E731
    assert total("preempted") > 0 and total("oom_retries") > 0 and total("failed") > 0
    # the sweep floods research: many trials wait, and the oversized release replay waits long
    sweep = [j for j in history.jobs if "-sweep-" in j.request_id]
    assert len(sweep) == demo_history.SWEEP_JOBS and max(j.waited_s for j in sweep) > 3600
    (full,) = [j for j in history.jobs if "-full-odd-" in j.request_id]
    assert full.waited_s > 3600
    # preempted research resumes: a later attempt of the same request runs after the preemption
    preempted = [j for j in history.jobs if any(x.outcome == "preempted" for x in j.segments)]
    assert all(len(j.segments) >= 2 for j in preempted)


def test_no_gpu_is_held_twice_and_no_flavor_over_capacity(history, policy):
    held: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for job in history.jobs:
        for seg in job.segments:
            assert sum(len(g) for _, g in seg.placement) == job.request.gpu_count
            nodes = {n.name: n.flavor for n in history.nodes}
            for node, gpus in seg.placement:
                assert nodes[node] == seg.flavor
                for g in gpus:
                    held.setdefault((node, g), []).append((seg.start, seg.end))
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end


def test_feeds_agree_with_each_other(history, policy, tmp_path):
    day = DAYS[3]
    nodes = parse_nodes(demo_history.nodes_doc(history, day), source="nodes.json")
    pods = parse_pods(demo_history.pods_doc(history, day, policy), source="pods.json")
    assert nodes.quarantine.height == 0 and pods.quarantine.height == 0
    assert nodes.accepted == len(history.nodes) and pods.accepted > 0
    keys = set(nodes.rows["provider_key"].to_list())
    rows = demo_history.focus_rows(history)
    instance_rows = [r for r in rows if r.get("ResourceType") == "Instance"]
    assert {provider_key(r["ResourceId"])[1] for r in instance_rows} == keys  # bills match nodes by cloud id
    # the fleet is the policy's node shapes (what the gate's node model places work on)
    shape = {f: s.gpus_per_node for f, s in policy.node_shapes.items()}
    by_node = {n.name: n.flavor for n in history.nodes}
    for name, cap in zip(nodes.rows["node"].to_list(), nodes.rows["gpu_capacity"].to_list(), strict=True):
        assert cap == shape[by_node[name]]
    # nodes carry their flavor's node pool (training / inference / spot), as on a real cluster,
    # so node-pool scorecards and signals never take a flavor for a pool
    pool_of = {f.name: f.node_pool for f in policy.flavors}
    by_name = {n.name: n for n in history.nodes}
    assert set(nodes.rows["node_pool"].to_list()) <= set(pool_of.values())
    for name, pool in zip(nodes.rows["node"].to_list(), nodes.rows["node_pool"].to_list(), strict=True):
        assert pool == pool_of[by_name[name].flavor]
    frame = demo_history.dcgm_frame(history, history.nodes[0], day, policy, np.random.default_rng(0))
    labelled = set(frame["pod"].drop_nulls().unique().to_list())
    on_node = set(pods.rows.filter(pods.rows["node"] == history.nodes[0].name)["pod"].to_list())
    assert labelled and labelled <= on_node  # every sample's pod is a pod of that node
    busy = frame.filter(frame["metric"] != demo_history.FB_USED)
    memory = frame.filter(frame["metric"] == demo_history.FB_USED)
    assert busy.height == 86400 // 15 * 8  # one busy sample per GPU every 15 s
    assert memory.height == 86400 // (15 * demo_history.MEMORY_EVERY) * 8  # framebuffer use every 60 s
    held = memory.filter(memory["pod"].is_not_null())
    assert held.height and held["value"].min() > 0  # a GPU a pod holds uses memory
    assert memory.filter(memory["pod"].is_null())["value"].max() == 0
    assert memory["value"].max() <= 0.95 * 80 * 1024 + 1  # never over the GPU's framebuffer
    assert json.dumps(demo_history.summary(history))


def test_release_chains_run_in_lineage_order_with_consistent_ids(history, policy):
    chain = {j.request_id: j for j in history.jobs if j.request_id in history.parents}
    releases = [j for j in chain.values() if j.request.workload in ("released_model", "released_map")]
    assert {j.request.workload for j in releases} == {"released_model", "released_map"}
    assert len(releases) >= 2 and all(j.segments[-1].outcome == "finished" for j in releases)
    for rid, parents in history.parents.items():
        job = chain[rid]
        # each stage runs on a GPU like any history job, after every upstream request finished
        assert job.segments and all(s.placement for s in job.segments)
        for p in parents:
            up = chain[p.request_id]
            assert up.segments[-1].outcome == "finished" and up.segments[-1].end <= job.segments[0].start
            assert p.via_id in up.request.output_artifact_ids
        # a valid request of its lane, with ids no live demo request uses
        assert validate_request(json.loads(job.request.to_json()), policy).request_id == rid
        assert all("-chain" in a for a in job.request.output_artifact_ids)
    models = [j for j in releases if j.request.workload == "released_model"]
    for rel in models:
        kinds = _upstream_kinds(history, rel.request_id)
        assert {"label_batch", "training_run", "replay", "evidence_pack"} <= kinds
        train = next(chain[p.request_id] for p in history.parents[rel.request_id] if p.kind == "training_run")
        assert rel.request.candidate_id == train.request.candidate_id
        assert rel.request.odd_cell == train.request.odd_cell == "odd-urban-day"
    # the first chain's candidate training was OOM-killed once and retried
    trains = sorted((j for j in chain.values() if j.request.workload == "training_run"), key=lambda j: j.submit)
    assert trains[0].segments[0].outcome == "oom" and trains[0].segments[-1].outcome == "finished"
    assert demo_history.summary(history)["releases"] == {k: sum(j.request.workload == k for j in releases)
                                                         for k in ("released_model", "released_map")}
    # the same days give the same history
    again = demo_history.generate(policy, DAYS)
    assert again.parents == history.parents and [j.request_id for j in again.jobs] == [j.request_id for j in history.jobs]


def _upstream_kinds(history, rid: str) -> set[str]:
    kinds: set[str] = set()
    for p in history.parents.get(rid, []):
        kinds |= {p.kind} | _upstream_kinds(history, p.request_id)
    return kinds


@pytest.fixture(scope="module")
def priced(history, policy, tmp_path_factory):
    """The history in a real SQLite ledger and feed files, ingested into a DuckDB file and priced
    by the SQL models for every day (what `demo seed` and the pricing assets do)."""
    import duckdb

    from gpu_platform.finops.feeds import ingest
    from gpu_platform.finops.snapshot import ledger_snapshot, lineage_edges, scorecard_snapshot
    from gpu_platform.finops.sqlmodels import (
        Project,
        default_project_path,
        ensure_raw_tables,
        load_ledger_snapshot,
    )
    from gpu_platform.finops.sqlmodels.raw import load_scorecard_snapshot
    from gpu_platform.lineage.graph import LineageStore
    from gpu_platform.observe.scorecards import model_vars
    from gpu_platform.requests.ledger import Ledger

    tmp = tmp_path_factory.mktemp("priced")
    ledger = Ledger(f"sqlite:///{tmp / 'ledger.db'}")
    demo_history.write_ledger(history, ledger, policy)
    demo_history.write_feeds(history, tmp / "feeds", policy)
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    ensure_raw_tables(con)
    for day in DAYS:
        ingest.load_dcgm_day(con, tmp / "feeds", day, [])
        ingest.load_focus_day(con, tmp / "feeds", day)
        for kind in ("nodes", "pods"):
            ingest.load_inventory_day(con, tmp / "feeds", day, kind)
    store = LineageStore(ledger.engine)
    load_ledger_snapshot(con, *ledger_snapshot(ledger, policy, store), lineage_edges(store))
    load_scorecard_snapshot(con, *scorecard_snapshot(ledger, store))
    project = Project.load(default_project_path())
    span = (DAYS[0], DAYS[-1])
    project.build(con, days=span, variables=model_vars(policy))
    tests = project.run_tests(con, days=span, variables=model_vars(policy))
    yield con, store, tests
    con.close()


def test_released_models_and_maps_are_priced_over_their_recorded_lineage(history, priced):
    con, store, tests = priced
    rows = con.execute("select request_id, currency, lineage_source, lineage_requests, cost_per_released_model "
                       "from unit_cost_released_model order by request_id").fetchall()
    released = sorted(j.request_id for j in history.jobs if j.request.workload == "released_model")
    assert [r[0] for r in rows] == released and rows
    for rid, currency, source, n, cost in rows:
        assert (currency, source) == ("USD", "lineage") and cost > 0
        tree = {node.request_id for node in store.tree(rid).unique()}
        # label batch(es), the training run, replay(s), the ODD-cell evidence pack and the release
        assert n == len(tree) >= 5
        lifetime = con.execute("select sum(cost), sum(failed_attempt_cost) from int_request_cost "
                               "where list_contains($ids, request_id)", {"ids": sorted(tree)}).fetchone()
        assert cost == lifetime[0]
    # the first release's training was OOM-killed once: that attempt's cost is in the release's cost
    first = rows[0][0]
    train = next(n.request_id for n in store.tree(first).unique() if n.kind == "training_run")
    (failed,) = con.execute("select failed_attempt_cost from int_request_cost where request_id = $r",
                            {"r": train}).fetchone()
    assert failed > 0
    maps = con.execute("select currency, lineage_source, lineage_requests, cost_per_released_map "
                       "from unit_cost_released_map").fetchall()
    assert len(maps) == sum(j.request.workload == "released_map" for j in history.jobs) > 0
    assert all(m[:3] == ("USD", "lineage", 3) and m[3] > 0 for m in maps)  # segmentation, map replay, release
    # each chain's ODD-cell evidence pack is one approval of its cell
    approvals = con.execute("select approvals, cost_per_approval, reason from unit_cost_odd_cell_approval "
                            "where release_packet_id like 'rel-2026.12-perception-%-chain'").fetchall()
    assert approvals and all(a[0] == 1 and a[1] > 0 and a[2] is None for a in approvals)


def test_every_unit_cost_row_has_a_currency_and_every_gap_a_reason(priced):
    con, _, tests = priced
    for table in ("unit_cost_training_run", "unit_cost_accepted_label", "unit_cost_replay_hour",
                  "unit_cost_evidence_pack", "unit_cost_odd_cell_approval", "unit_cost_released_model",
                  "unit_cost_released_map", "int_request_cost"):
        assert con.execute(f"select count(*) from {table} where currency is null").fetchone()[0] == 0, table
    assert con.execute("select count(*) from unpriced_requests").fetchone()[0] == 0  # every history pod is priced
    failing = {(t.model, t.test_name) for t in tests if t.failures}
    unit_tests = {(t.model, t.test_name) for t in tests if t.model.startswith(("unit_cost_", "int_shared_cost", "chargeback"))}
    assert unit_tests and not failing & unit_tests, failing & unit_tests
    # a cell with replays and no evidence pack says why it has no cost per approval
    (reason,) = con.execute("select reason from unit_cost_odd_cell_approval where approvals = 0 limit 1").fetchone()
    assert reason.startswith("no evidence pack for this cell yet")
    # the history's last day has a credit (ChargeCategory Credit, -250 USD): its own column, shared out like
    # shared cost, never netted into it
    credits = con.execute("select credit_cost from int_shared_cost where credit_cost <> 0").fetchall()
    assert [float(c) for (c,) in credits] == [-250.0]
    assert float(con.execute("select sum(credit_cost) from chargeback").fetchone()[0]) == pytest.approx(-250.0)
    assert con.execute("select count(*) from int_shared_cost where shared_cost < 0").fetchone()[0] == 0
    assert con.execute("select count(*) from chargeback where shared_cost < 0 and shared_cost_reason is null"
                       ).fetchone()[0] == 0
