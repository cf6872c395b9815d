"""The admission sensor reports the queue as `gpu_queue` observations, one per lane, every tick."""

from __future__ import annotations

import dagster as dg

from assets.definitions import build_definitions
from assets.gate import GPU_QUEUE
from gpu_platform.observe.queueview import read_gate_snapshot
from tests.gate.helpers import add_run, submit, tick


def _by_lane(result) -> dict[str, dict]:
    """lane -> its observation's metadata values; per-flavor counts as `<lane>/<measure>/<flavor>`
    from its `by_flavor` table."""
    out = {}
    for ev in result.asset_events:
        assert isinstance(ev, dg.AssetObservation) and ev.asset_key == GPU_QUEUE
        meta = {k: v.value for k, v in ev.metadata.items()}
        lane = next(k for k in meta if k.endswith("/pending")).split("/")[0]
        for row in ev.metadata[f"{lane}/by_flavor"].records:
            for measure in ("gpus_in_use", "gpus_pending"):
                meta[f"{lane}/{measure}/{row.data['flavor']}"] = row.data[measure]
        out[lane] = meta
    return out


def test_empty_queue_still_observes_every_lane(env, policy):
    instance, _, resources, _ = env
    result = tick(instance, resources)
    lanes = _by_lane(result)
    assert set(lanes) == set(policy.lanes)
    assert result.skip_reason is not None  # nothing launched; the tick still reports
    research = lanes["research_best_effort"]
    assert research["research_best_effort/pending"] == 0
    assert research["research_best_effort/head_reason"] == "nothing waits"
    # one series per flavor the lane has quota on, zeros included
    assert research["research_best_effort/gpus_in_use/h100-ondemand"] == 0
    assert research["research_best_effort/gpus_pending/a100-spot"] == 0


def test_counts_follow_the_ticks_decisions_and_live_runs(env, policy):
    instance, ledger, resources, _ = env
    ids = [
        submit(ledger, policy, "candidate_train", output_artifact_ids=[f"m{i}"], gpu_count=8) for i in range(4)
    ]
    first = _by_lane(tick(instance, resources))["candidate_train"]
    admitted = [r for r in ids if ledger.state(r).state == "admitted"]
    waiting = [r for r in ids if ledger.state(r).state == "waiting"]
    assert admitted and waiting
    assert first["candidate_train/admitted"] == f"{len(admitted)} (0 running)"  # launched this tick: no run yet
    assert first["candidate_train/pending"] == len(waiting)
    assert first["candidate_train/gpus_in_use"] == 8 * len(admitted)
    assert first["candidate_train/gpus_in_use/h100-ondemand"] == 8 * len(admitted)
    assert first["candidate_train/gpus_pending/h100-ondemand"] == 8 * len(waiting)
    head = min(waiting, key=lambda r: ledger.state(r).details["position"])
    assert first["candidate_train/head_request"] == head
    assert first["candidate_train/head_reason"] == ledger.state(head).reason
    assert first["candidate_train/oldest_wait_s"] >= 0

    add_run(instance, admitted[0], 1, lane="candidate_train")
    second = _by_lane(tick(instance, resources))["candidate_train"]
    assert second["candidate_train/admitted"] == f"{len(admitted)} (1 running)"
    stored = read_gate_snapshot(ledger.engine)["candidate_train"]
    assert (stored.pending, stored.admitted, stored.running) == (len(waiting), len(admitted), 1)


def test_preemption_victim_counts_as_pending_again(preempted):
    instance, ledger, resources, _, incident, victim, _ = preempted
    lanes = _by_lane(tick(instance, resources))
    research = lanes["research_best_effort"]
    assert research["research_best_effort/pending"] >= 1
    assert research["research_best_effort/gpus_pending/h100-ondemand"] >= ledger.get(victim).gpu_count


def test_observations_are_numeric_on_a_real_instance_and_the_asset_says_how_to_read_it(env, policy):
    instance, ledger, resources, _ = env
    submit(ledger, policy, "labeler_batch")
    for _ in range(2):
        for ev in tick(instance, resources).asset_events:
            instance.report_runless_asset_event(ev)  # what the daemon does with a sensor's asset_events
    records = instance.fetch_observations(GPU_QUEUE, limit=100).records
    assert len(records) == 2 * len(policy.lanes)
    labeler = [
        r.asset_observation.metadata for r in records if "labeler_batch/pending" in r.asset_observation.metadata
    ]
    assert len(labeler) == 2
    for meta in labeler:
        # four plots per lane, the rest text and tables (the Plots tab stays short)
        plotted = sorted(k for k, v in meta.items() if isinstance(v, dg.IntMetadataValue | dg.FloatMetadataValue))
        assert plotted == sorted(f"labeler_batch/{m}" for m in ("pending", "gpus_pending", "gpus_in_use", "oldest_wait_s"))
        assert isinstance(meta["labeler_batch/oldest_wait_s"], dg.FloatMetadataValue)
        assert meta["labeler_batch/admitted"].value.startswith("1 (")
        assert isinstance(meta["labeler_batch/by_flavor"], dg.TableMetadataValue)
        assert next(iter(meta)) == "labeler_batch/waiting"
    spec = next(s for s in build_definitions("test").resolve_all_asset_specs() if s.key == GPU_QUEUE)
    assert "Plots" in spec.description and "head_reason" in spec.description
