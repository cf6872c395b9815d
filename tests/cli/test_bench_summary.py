"""`make bench`'s summary judges `bench/bench_cli.py`'s figures against issue 40's targets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _summary(results: list[dict]) -> list[str]:
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert any(name == "cli" and cmd[1] == "bench/bench_cli.py" for name, cmd, _ in mod.BENCHES)
    return [line for line in mod.summary({"cli": results}) if line.startswith("| CLI: ")]


RESULTS = [
    {"benchmark": "cli_import", "median_s": 0.09, "cpu_median_s": 0.08, "heavy_modules": []},
    {"benchmark": "cli_help", "median_s": 0.12, "cpu_median_s": 0.1},
    {"benchmark": "cli_command_help", "median_s": 0.2, "max_s": 0.29, "slowest": "demo"},
    {"benchmark": "cli_subcommand_help", "median_s": 0.21, "max_s": 0.35, "slowest": "cost build"},
    {"benchmark": "cli_queue", "days": 30, "requests": 840, "median_s": 0.8, "cpu_median_s": 0.6, "json_median_s": 0.7},
]


def test_each_cli_target_is_a_row_met_or_not():
    rows = _summary(RESULTS)
    assert len(rows) == 5
    imp, root, top, sub, queue = rows
    assert "heavy libraries imported: none" in imp and imp.endswith("| yes |")
    assert "0.120 s (0.100 s CPU)" in root and root.endswith("| yes |")
    assert "0.290 s (demo)" in top and top.endswith("| yes |")
    assert "0.350 s (cost build)" in sub and sub.endswith("| **no** |")
    assert "30 days, 840 requests" in queue and "0.800 s (0.600 s CPU" in queue and queue.endswith("| yes |")


def test_no_cli_results_no_rows():
    assert _summary([]) == []
