"""On the demo's seeded day every scorecard is computed and at least one signal fires with its action."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from gpu_platform.cli.app import main
from gpu_platform.observe.scorecards import fired
from gpu_platform.observe.scorecards.read import SCORECARD_TABLES


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_WAREHOUSE", "GPU_PLATFORM_EVIDENCE_ROOT",
                "GPU_PLATFORM_DCGM_ENDPOINTS", "GPU_PLATFORM_POLICY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPU_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def test_demo_day_has_every_scorecard_and_a_fired_signal(demo_env: Path):
    out = CliRunner().invoke(main, ["demo", "seed", "--days", "1", "--price-days", "1"])
    assert out.exit_code == 0, out.output
    summary = json.loads((demo_env / "home" / ".demo_seeded").read_text())
    first, last = summary["priced_now"][0], summary["priced_now"][-1]
    with duckdb.connect(str(demo_env / "home" / "warehouse.duckdb"), read_only=True) as con:
        for table in SCORECARD_TABLES:
            assert con.execute(f"select count(distinct day) from {table}").fetchone()[0] == 1, table
        dims = {d for (d,) in con.execute("select distinct dimension from scorecard_utilization").fetchall()}
        assert dims == {"node_pool", "flavor", "lane", "team", "site", "sharing_mode", "profile"}
        assert con.execute("select sum(attempts) from scorecard_failures where dimension = 'lane'").fetchone()[0] > 0
        # cache efficiency from each run's pod timings; right-sizing from framebuffer use
        timed, share = con.execute(
            "select sum(timed_runs), max(pull_setup_share) from scorecard_cache_efficiency where dimension = 'all'"
        ).fetchone()
        assert timed > 0 and 0 < share < 1
        peaks = con.execute("select value from capacity_signals where signal = 'whole_gpu_fits_slice'").fetchall()
        assert peaks and all(0 < v <= 80 for (v,) in peaks)  # peak GiB of whole-GPU requests
        signals = fired(con, first, last)
        assert signals, "no signal fired on the demo day"
        assert all(s.action and s.severity in ("WARN", "ERROR") for s in signals)
        assert "pool_utilization_low" in {s.signal for s in signals}
