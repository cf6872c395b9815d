"""Prometheus label values from the ledger are escaped by prometheus_client itself (issue 24,
class 2): a hostile flavor recorded at admission is exposed and parses back exactly."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.observe.metrics import registry_for
from tests.gate.helpers import submit

HOSTILE = 'h100"} evil_metric 1\n# TYPE x counter\\n\\\\ end'


def test_a_hostile_label_value_parses_back_exactly(env, policy):
    _instance, ledger, _resources, _home = env
    rid = submit(ledger, policy, "candidate_train", output_artifact_ids=["m"], gpu_count=8)
    ledger.record(rid, "admitted", "test", flavor=HOSTILE)
    text = generate_latest(registry_for(ledger, policy)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "evil_metric" not in families and "x" not in families
    in_use = [s for s in families["gpu_platform_gpus_in_use"].samples if s.labels.get("flavor") == HOSTILE]
    assert len(in_use) == 1 and in_use[0].labels["lane"] == "candidate_train" and in_use[0].value == 8
    # one sample per line: the newline and quotes are escaped in the exposition
    assert all(not line.startswith("evil_metric") for line in text.splitlines())
