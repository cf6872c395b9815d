"""The seeded history's release chains are partitions the UI can open: each chain stage is a
partition of its workload kind's set, each finished stage has a materialization saying it was
seeded, and a lineage link is drawn only to a partition that exists (the UI opens another
partition in place of a missing one)."""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg
import pytest

from assets.demo_seed import SEEDED, register_history
from assets.workloads import partition_exists, upstream_metadata
from gpu_platform.demo import history as demo_history
from gpu_platform.demo.instance import history_release_stages
from gpu_platform.policy import load_policy
from gpu_platform.requests.ledger import Ledger
from resources.ledger import LedgerResource
from resources.policy import PolicyResource

DAYS = [date(2026, 11, 1) + timedelta(days=n) for n in range(3)]


@pytest.fixture
def seeded(tmp_path):
    policy = load_policy(None)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    history = demo_history.generate(policy, DAYS)
    demo_history.write_ledger(history, ledger, policy)
    resources = {"ledger": LedgerResource(url=url), "policy": PolicyResource()}
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield instance, ledger, policy, resources, history


def _release(history, chain: str) -> str:
    return next(rid for rid in history.parents if chain in rid and rid.endswith("-release"))


def test_every_release_chain_stage_is_a_partition_of_its_kind(seeded):
    instance, ledger, policy, resources, history = seeded
    stages = history_release_stages(ledger, policy)
    assert {s.request_id for s in stages} >= set(history.parents)
    added, reported = register_history(instance, resources)
    assert added == len({s.request_id for s in stages}) and reported > 0
    model, mapping = _release(history, "model-chain"), _release(history, "map-chain")
    assert model in instance.get_dynamic_partitions("released_model_requests")
    assert mapping in instance.get_dynamic_partitions("released_map_requests")
    train = next(rid for rid in history.parents if rid.endswith("model-chain-train"))
    assert train in instance.get_dynamic_partitions("training_run_requests")
    pack = next(rid for rid in history.parents if rid.endswith("model-chain-evidence-pack"))
    assert pack in instance.get_dynamic_partitions("evidence_pack_requests")
    # nothing twice: a second call (every `demo run` makes one) adds and reports nothing
    assert register_history(instance, resources) == (0, 0)


def test_a_seeded_release_partition_shows_its_own_release(seeded):
    instance, ledger, policy, resources, history = seeded
    register_history(instance, resources)
    model = _release(history, "model-chain")
    for asset in ("released_model", "model_evidence_pack"):
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[model]), limit=5).records
        md = record.asset_materialization.metadata
        assert record.partition_key == model and md["request_id"].value == model
        assert md["seeded_history"].value == SEEDED and md["gpu_hours"].value is not None
    (release,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("released_model"), asset_partitions=[model]), limit=1).records
    links = release.asset_materialization.metadata["upstream_links"].value
    assert f"/assets/model_evidence_pack?view=partitions&partition={model}" in links  # its own pack, which exists


def test_a_link_to_a_partition_that_does_not_exist_is_not_drawn(seeded):
    instance, *_ = seeded
    instance.add_dynamic_partitions("training_run_requests", ["req-there"])
    exists = partition_exists(instance)
    md = {"request_id": "req-x", "upstream": [
        {"request_id": "req-there", "kind": "training_run", "via_id": "m1"},
        {"request_id": "req-gone", "kind": "training_run", "via_id": "m2"},
    ]}
    links = upstream_metadata(md, "replay", exists)["upstream_links"].value.splitlines()
    assert links[0] == "- [training_run[req-there]](/assets/training_run?view=partitions&partition=req-there) via `m1`"
    assert "(/assets/" not in links[1] and "req-gone" in links[1] and "not linked" in links[1]
