"""`gpu-platform demo seed` on a temporary GPU_PLATFORM_HOME and DAGSTER_HOME: live requests,
history through the engine, feeds, the newest day priced in one real Dagster run, the older day
left to the backfill, and a second seed that changes nothing."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.demo.costs import demo_days
from gpu_platform.paths import first_data_day
from gpu_platform.requests.ledger import Ledger


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_WAREHOUSE", "GPU_PLATFORM_EVIDENCE_ROOT",
                "GPU_PLATFORM_DCGM_ENDPOINTS", "GPU_PLATFORM_POLICY", "GPU_PLATFORM_FIRST_DAY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def test_seed_prices_the_newest_days_and_plans_a_backfill_for_the_rest(demo_env: Path):
    out = CliRunner().invoke(main, ["demo", "seed", "--days", "2", "--price-days", "1"])
    assert out.exit_code == 0, out.output
    older, newest = (d.isoformat() for d in demo_days(2))
    home = demo_env / "home"
    marker = json.loads((home / ".demo_seeded").read_text())
    assert marker["priced_now"] == [newest] and marker["backfill"] == [older]
    assert first_data_day() == older  # the daily partitions start at the first seeded day
    plan = json.loads((home / "demo_backfill.json").read_text())
    assert plan["partitions"] == [older] and {"raw_dcgm_samples", "chargeback"} <= set(plan["asset_keys"])
    for kind in ("dcgm", "nodes", "pods"):
        assert sorted(p.name for p in (home / "feeds" / kind).iterdir()) == [older, newest]

    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select list(distinct cast(day as varchar)) from chargeback where total_cost > 0"
                           ).fetchone()[0] == [newest]
        # bills matched nodes by instance id, pods by the request-id label: nothing unreconciled
        assert con.execute("select max(abs(difference)) from reconciliation").fetchone()[0] == 0
        assert con.execute("select count(*) from reconciliation_exceptions").fetchone()[0] == 0
        assert con.execute("select count(distinct team) from chargeback where team <> '(idle)'").fetchone()[0] >= 4

    with dg.DagsterInstance.get() as instance:
        assert instance.get_materialized_partitions(dg.AssetKey("chargeback")) == {newest}
        assert instance.event_log_storage.get_concurrency_info("duckdb_warehouse").slot_count == 1

    ledger = Ledger()
    n_requests = ledger.count()[0]
    assert n_requests > 40
    # idempotent: the marker makes a second call a no-op
    again = CliRunner().invoke(main, ["demo", "seed", "--days", "2"])
    assert again.exit_code == 0 and "already seeded" in again.output
    assert Ledger().count()[0] == n_requests


def test_first_day_comes_from_the_environment_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_PLATFORM_FIRST_DAY", raising=False)
    assert first_data_day() == "2026-01-01"
    monkeypatch.setenv("GPU_PLATFORM_FIRST_DAY", "2026-11-01")
    assert first_data_day() == "2026-11-01"
    monkeypatch.setenv("GPU_PLATFORM_FIRST_DAY", "Nov 1")
    with pytest.raises(ValueError, match="GPU_PLATFORM_FIRST_DAY"):
        first_data_day()


def test_demo_days_end_yesterday():
    assert demo_days(3, today=date(2026, 12, 1)) == [date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30)]


def test_the_demo_instance_shows_no_first_visit_dialog(tmp_path, monkeypatch):
    """`nux: enabled: false` in the demo's dagster.yaml: Dagster's own setting behind the "Join the
    Dagster community" dialog; the instance built from the file reads it so."""
    import dagster as dg

    from gpu_platform.demo.instance import write_instance_yaml

    path = write_instance_yaml(tmp_path / "dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(path.parent))  # the file names its storage by it
    with dg.DagsterInstance.from_config(str(path.parent)) as instance:
        assert instance.nux_enabled is False
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(bare))
    with dg.DagsterInstance.from_config(str(bare)) as instance:
        assert instance.nux_enabled is True  # what a fresh demo showed before


def test_a_failed_seed_removes_what_it_created(demo_env: Path, monkeypatch: pytest.MonkeyPatch):
    from gpu_platform.demo import history as demo_history

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(demo_history, "write_feeds", broken)
    config = demo_env / "project" / "gpu-platform.yaml"
    config.parent.mkdir()
    out = CliRunner().invoke(main, ["demo", "seed", "--days", "2", "--project-config", str(config)])
    assert out.exit_code != 0
    assert "removed what it created" in out.output
    # nothing half-written: no home, no Dagster home, no project config naming a home that is gone
    assert not (demo_env / "home").exists() and not (demo_env / "dagster_home").exists()
    assert not config.exists()


def test_a_failed_seed_into_an_existing_home_says_what_to_delete(demo_env: Path, monkeypatch: pytest.MonkeyPatch):
    from gpu_platform.demo import history as demo_history

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(demo_history, "generate", broken)
    home = demo_env / "home"
    home.mkdir()
    (home / "kept.txt").write_text("mine")
    out = CliRunner().invoke(main, ["demo", "seed", "--days", "2"])
    assert out.exit_code != 0
    assert f"rm -rf {home}" in out.output and (home / "kept.txt").read_text() == "mine"
    assert not (demo_env / "dagster_home").exists()  # created by this seed: removed
