"""/metrics shows each running service's replicas (the ledger) and the newest day's cost per
1,000 requests (the warehouse), the figures `cost report` prints."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.observe.metrics import registry_for
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import validate_request_file
from tests.serving.test_cost_per_request import build_day


def _samples(registry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_show_replicas_and_cost_per_1k_requests(tmp_path, sqlite_url, policy):
    from tests.conftest import EXAMPLES

    build_day(tmp_path).close()
    ledger = Ledger(sqlite_url)
    req = validate_request_file(EXAMPLES / "online_serving.yaml", policy).model_copy(update={"request_id": "S-1"})
    ledger.submit(req, at=datetime(2026, 11, 28, tzinfo=UTC))
    ledger.record("S-1", "admitted", flavor="l4-inference", at=datetime(2026, 11, 28, 1, tzinfo=UTC))
    ledger.record("S-1", "replicas", details={"replicas": 5, "source": "cluster"},
                  at=datetime(2026, 11, 28, 2, tzinfo=UTC))
    got = _samples(registry_for(ledger, policy, warehouse=tmp_path / "w.duckdb"))
    svc = (("request_id", "S-1"), ("service", "perception-serving"))
    assert got[("gpu_platform_service_replicas", svc)] == 5.0
    assert (got[("gpu_platform_service_replicas_min", svc)], got[("gpu_platform_service_replicas_max", svc)]) == (2, 6)
    usd = (("currency", "USD"), ("service", "perception-serving"))
    assert got[("gpu_platform_service_cost_per_1k_requests", usd)] == 0.11525
    assert got[("gpu_platform_service_cost", usd)] == 66.384
    assert got[("gpu_platform_service_idle_cost", usd)] == 38.724
    assert got[("gpu_platform_service_requests", (("service", "perception-serving"),))] == 576_000
    assert got[("gpu_platform_service_requests", (("service", "map-tiles"),))] == 22.5
    # map-tiles has no priced GPU time: no cost figure at all, not a zero
    assert not any(name.startswith("gpu_platform_service_cost") and ("service", "map-tiles") in labels
                   for name, labels in got)
    assert got[("gpu_platform_service_cost_up", ())] == 1.0
    assert got[("gpu_platform_service_cost_day_timestamp_seconds", ())] == datetime(2026, 11, 28, tzinfo=UTC).timestamp()


def test_without_a_warehouse_file_the_cost_is_down_not_an_error(tmp_path, sqlite_url, policy):
    got = _samples(registry_for(Ledger(sqlite_url), policy, warehouse=tmp_path / "missing.duckdb"))
    assert got[("gpu_platform_service_cost_up", ())] == 0.0
    assert not any(name == "gpu_platform_service_cost_per_1k_requests" for name, _ in got)
