"""`make bench`'s summary judges the chargeback rebuild on its wall ratio to the GROUP BY floor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_all():
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(result: dict) -> str:
    lines = _run_all().summary({"chargeback": [{"benchmark": "chargeback_rebuild", "peak_rss_mib": 300} | result]})
    (row,) = [line for line in lines if line.startswith("| chargeback rebuild / GROUP BY pod floor")]
    return row


def test_chargeback_row_is_met_only_when_the_wall_ratio_is():
    # the last idle-machine figures: 2.75x wall although CPU is 1.67x -> not met
    missed = _row({"ratio": 2.75, "rebuild_s": 1.218, "floor_s": 0.442, "rebuild_cpu_s": 1.394, "floor_cpu_s": 0.836})
    assert missed.endswith("| **no** |") and "2.75x wall" in missed and "CPU 1.67x (1.394 s / 0.836 s)" in missed
    met = _row({"ratio": 1.9, "rebuild_s": 0.84, "floor_s": 0.442, "rebuild_cpu_s": 2.0, "floor_cpu_s": 0.836})
    assert met.endswith("| yes |") and "CPU 2.39x" in met  # a CPU ratio over 2 does not fail it either


def test_chargeback_row_shows_the_build_and_the_close_it_counts():
    # the rebuild_s judged is build + close (the close checkpoints the build into the file)
    row = _row({"ratio": 2.1, "rebuild_s": 1.19, "rebuild_build_s": 0.84, "rebuild_close_s": 0.35,
                "floor_s": 0.567, "rebuild_cpu_s": 1.5, "floor_cpu_s": 0.836})
    assert "(1.19 s = build 0.84 s + close 0.35 s, / 0.567 s)" in row and row.endswith("| **no** |")
    assert "close" not in _row({"ratio": 1.9, "rebuild_s": 0.84, "floor_s": 0.442})
