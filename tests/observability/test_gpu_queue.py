"""The admission sensor reports `gpu_queue` when the queue changed: an observation with two plotted
numbers per lane, then a materialization led by the table of waiting requests, then the lanes
and by-flavor tables."""

from __future__ import annotations

import json
import re
from datetime import UTC

import dagster as dg

from assets.definitions import build_definitions
from assets.gate import GPU_QUEUE, QUEUE_REFRESH_S, admission_sensor
from gpu_platform.observe.queueview import read_gate_snapshot
from tests.gate.helpers import add_run, submit, tick


def _materialization(result) -> dg.AssetMaterialization:
    plotted, event = result.asset_events  # the tables' event last: the newest, the one the UI opens on
    assert isinstance(plotted, dg.AssetObservation) and plotted.asset_key == GPU_QUEUE
    assert isinstance(event, dg.AssetMaterialization) and event.asset_key == GPU_QUEUE
    return event


def _plotted(result) -> dict:
    plotted, _ = result.asset_events
    return {k: v.value for k, v in plotted.metadata.items()}


QUEUE_CELL = re.compile(
    r"^(?:(?P<pending>\d+) waiting \((?P<gpus_pending>\d+) GPUs\), oldest \S+|nothing waits); "
    r"(?P<admitted>\d+) admitted(?:, (?P<running>\d+) running)? \((?P<gpus_in_use>\d+) GPUs\)$"
)
"""The lanes table's `queue` cell: `3 waiting (24 GPUs), oldest 1h5m; 2 admitted, 1 running (16 GPUs)`."""


def _by_lane(result) -> dict[str, dict]:
    """lane -> the numbers its `lanes` row says (`<lane>/pending`, ... read from its queue cell)
    and its head cell, its plotted numbers as `plot:<lane>/<measure>` and its per-flavor counts
    as `<lane>/<measure>/<flavor>` from the `by_flavor` table."""
    meta = _materialization(result).metadata
    plotted = _plotted(result)
    out: dict[str, dict] = {}
    for row in meta["lanes"].records:
        lane = row.data["lane"]
        assert set(row.data) == {"lane", "queue", "head"}
        m = QUEUE_CELL.match(row.data["queue"])
        assert m, row.data["queue"]
        out[lane] = {f"{lane}/{k}": int(v or 0) if k != "running" or v is not None else "" for k, v in m.groupdict().items()}
        out[lane][f"{lane}/head"] = row.data["head"]
        for measure in ("gpus_pending", "oldest_wait_s"):
            out[lane][f"plot:{lane}/{measure}"] = plotted[f"{lane}/{measure}"]
    for row in meta["by_flavor"].records:
        for measure in ("gpus_in_use", "gpus_pending"):
            out[row.data["lane"]][f"{row.data['lane']}/{measure}/{row.data['flavor']}"] = row.data[measure]
    return out


def _tick_with(instance, resources, cursor):
    return admission_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def test_empty_queue_still_materializes_every_lane(env, policy):
    instance, _, resources, _ = env
    result = tick(instance, resources)
    lanes = _by_lane(result)
    assert list(lanes) == [lane.name for lane in policy.lanes_by_priority()]
    assert result.skip_reason is not None  # nothing launched; the tick still reports
    research = lanes["research_best_effort"]
    assert research["research_best_effort/pending"] == 0
    assert research["research_best_effort/head"] == "nothing waits"
    assert research["plot:research_best_effort/gpus_pending"] == 0
    # one row per flavor the lane has quota on, zeros included
    assert research["research_best_effort/gpus_in_use/h100-ondemand"] == 0
    assert research["research_best_effort/gpus_pending/a100-spot"] == 0
    assert _materialization(result).description == "nothing waits"


def test_counts_follow_the_ticks_decisions_and_live_runs(env, policy):
    instance, ledger, resources, _ = env
    ids = [
        # five 8-GPU runs ask for more than the 32 H100s (idle reserves are lent): some wait
        submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8) for i in range(5)
    ]
    first = _by_lane(tick(instance, resources))["candidate_train"]
    admitted = [r for r in ids if ledger.state(r).state == "admitted"]
    waiting = [r for r in ids if ledger.state(r).state == "waiting"]
    assert admitted and waiting
    assert (first["candidate_train/admitted"], first["candidate_train/running"]) == (len(admitted), 0)
    assert first["candidate_train/pending"] == len(waiting)
    assert first["candidate_train/gpus_in_use"] == 8 * len(admitted)
    assert first["candidate_train/gpus_in_use/h100-ondemand"] == 8 * len(admitted)
    assert first["candidate_train/gpus_pending/h100-ondemand"] == 8 * len(waiting)
    assert first["plot:candidate_train/gpus_pending"] == 8 * len(waiting)
    head = min(waiting, key=lambda r: ledger.state(r).details["position"])
    req = ledger.get(head)
    assert first["candidate_train/head"] == f"{req.name or head} ({req.owner}): {ledger.state(head).reason}"
    assert first["plot:candidate_train/oldest_wait_s"] >= 0

    add_run(instance, admitted[0], 1, lane="candidate_train")
    second = _by_lane(tick(instance, resources))["candidate_train"]
    assert second["candidate_train/running"] == 1
    stored = read_gate_snapshot(ledger.engine)["candidate_train"]
    assert (stored.pending, stored.admitted, stored.running) == (len(waiting), len(admitted), 1)


def test_preemption_victim_counts_as_pending_again(preempted):
    instance, ledger, resources, _, incident, victim, _ = preempted
    lanes = _by_lane(tick(instance, resources))
    research = lanes["research_best_effort"]
    assert research["research_best_effort/pending"] >= 1
    assert research["research_best_effort/gpus_pending/h100-ondemand"] >= ledger.get(victim).gpu_count


def test_materialized_only_when_the_queue_changed_or_it_is_old(env, policy):
    instance, ledger, resources, _ = env
    first = tick(instance, resources)
    assert len(first.asset_events) == 2 and first.cursor
    same = _tick_with(instance, resources, first.cursor)
    assert same.asset_events == [] and same.cursor == first.cursor  # nothing changed: no new event
    submit(ledger, policy, "labeler_batch")
    changed = _tick_with(instance, resources, same.cursor)
    assert len(changed.asset_events) == 2 and changed.cursor != first.cursor
    # unchanged but old: materialized again, so the oldest-wait plots keep a point every few minutes
    doc = json.loads(changed.cursor)
    stale = json.dumps({**doc, "at": doc["at"] - QUEUE_REFRESH_S - 1})
    assert len(_tick_with(instance, resources, stale).asset_events) == 2
    assert len(_tick_with(instance, resources, "not json").asset_events) == 2  # a cursor it cannot read


def test_materializations_on_a_real_instance_plot_two_numbers_per_lane(env, policy):
    """The plotted numbers come in an observation before each materialization (the Plots tab
    draws both kinds); the materialization, the newest event, carries the tables and only short
    keys, so the UI's key column stays narrow."""
    instance, ledger, resources, _ = env
    submit(ledger, policy, "labeler_batch")
    for _ in range(2):
        for ev in tick(instance, resources).asset_events:
            instance.report_runless_asset_event(ev)  # what the daemon does with a sensor's asset_events
    records = instance.fetch_materializations(GPU_QUEUE, limit=100).records
    assert len(records) == 2
    assert instance.get_latest_materialization_event(GPU_QUEUE) is not None  # not "Never materialized"
    for record in records:
        meta = record.asset_materialization.metadata
        assert list(meta) == ["waiting", "lanes", "by_flavor"]
        assert all(isinstance(meta[k], dg.TableMetadataValue) for k in meta)
    observations = instance.fetch_observations(GPU_QUEUE, limit=100).records
    assert len(observations) == 2
    for record in observations:
        meta = record.asset_observation.metadata
        assert sorted(meta) == sorted(f"{lane}/{m}" for lane in policy.lanes for m in ("gpus_pending", "oldest_wait_s"))
        assert all(isinstance(v, dg.IntMetadataValue | dg.FloatMetadataValue) for v in meta.values())
        assert isinstance(meta["labeler_batch/oldest_wait_s"], dg.FloatMetadataValue)
    # the tables' event is the newest: the Events tab opens on it
    assert observations[0].timestamp < records[0].timestamp
    spec = next(s for s in build_definitions("test").resolve_all_asset_specs() if s.key == GPU_QUEUE)
    assert "Plots" in spec.description and "its head" in spec.description


ENGINE_ETA = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")


def test_every_waiting_row_has_an_eta_or_says_why_not(env, policy):
    """The engine's estimate for a request waiting for quota; for one held for its inputs, not
    before its producer's expected end (admission + expected_duration: a lower bound); otherwise
    why there is none. The waiting table is five columns wide, the reason last."""
    instance, ledger, resources, _ = env
    labels = submit(ledger, policy, "labeler_batch", output_artifact_ids=["lbl-eta"])
    trainer = submit(ledger, policy, "candidate_train", name="trainer on lbl-eta", dataset_ids=["lbl-eta"],
                     output_artifact_ids=["model-eta"])
    # five 8-GPU runs ask for more than the 32 H100s (idle reserves are lent): some wait
    busy = [submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8) for i in range(5)]
    result = tick(instance, resources)
    table = _materialization(result).metadata["waiting"]
    assert [c.name for c in table.schema.columns] == ["request", "eta", "reason"]
    # the request cell ends with the id (or starts with it, when the request has no name of its own)
    rows = {rid: r.data for r in table.records for rid in (labels, trainer, *busy) if rid in r.data["request"]}
    assert rows and all(r["eta"] for r in rows.values()), [r["eta"] for r in rows.values()]
    assert ledger.state(labels).state == "admitted"
    admitted = ledger.state(labels).updated_at
    expected_end = (admitted + ledger.get(labels).expected_duration).astimezone(UTC)
    held = rows[trainer]
    assert " — candidate_train, held, waited " in held["request"] and held["reason"].startswith("WaitingForUpstream")
    assert held["eta"] == f"not before {expected_end:%Y-%m-%d %H:%M} UTC (after its upstream)"
    waiting = [rid for rid in busy if ledger.state(rid).state == "waiting"]
    assert waiting and all(ENGINE_ETA.match(rows[rid]["eta"]) for rid in waiting)


def test_a_wait_without_an_estimate_says_why(env, policy):
    """The engine gives no estimated start over budget: the row says so instead of a blank."""
    from gpu_platform.admission.model import PendingInfo
    from gpu_platform.observe.queueview import eta_text, lane_snapshots

    _, ledger, _, _ = env
    rid = submit(ledger, policy, "research_best_effort")
    state = ledger.state(rid)
    wait = PendingInfo(rid, "research_best_effort", "BudgetExhausted", "QuotaReserved", "BudgetExhausted: over", 1, 1)
    (row,) = [w for s in lane_snapshots(policy, [state], state.submitted_at, waits=[wait]) for w in s.waiting]
    assert row.eta is None and eta_text(row) == "unknown: over budget (max_cost or the lane's budget)"
