"""Bounded DCGM lines and label values (issue 43 part 4): dcgm-exporter text as the exporter
prints it (tests/fixtures/feeds/dcgm-metrics-k8s-unassigned.txt) with one line carrying a 30 MB
label value and one a 5,000-character one: both are quarantined with their line number and
reason, fast, and every other line reads as before."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from gpu_platform.finops.feeds import dcgm

FIX = Path(__file__).parent.parent / "fixtures" / "feeds" / "dcgm-metrics-k8s-unassigned.txt"
AT = datetime(2026, 11, 28, 12, tzinfo=UTC)


def test_overlong_lines_and_label_values_are_quarantined_fast_and_the_rest_reads_as_before():
    text = FIX.read_text()
    sample = next(line for line in text.splitlines() if line and not line.startswith("#") and 'pod=""' in line)
    huge = sample.replace('pod=""', 'pod="' + "x" * 30_000_000 + '"', 1)
    long = sample.replace('pod=""', 'pod="' + "y" * (dcgm.MAX_LABEL_VALUE_CHARS + 1) + '"', 1)
    n = text.count("\n")
    base = dcgm.parse_text(text, source="t", scraped_at=AT)
    started = time.process_time()
    batch = dcgm.parse_text(text + huge + "\n" + long + "\n# HELP " + "z" * 70_000 + "\n", source="t", scraped_at=AT)
    assert time.process_time() - started < 5  # 28.5 s before the bound
    assert batch.rows_in == base.rows_in + 2 and batch.accepted == base.accepted
    q = {r["source_line"]: r for r in batch.quarantine.iter_rows(named=True)}
    assert q[n + 1]["reason"] == f"line {n + 1}: line is {len(huge.encode())} bytes, over the limit of 65536"
    assert len(q[n + 1]["raw"]) < 300
    assert q[n + 2]["reason"].endswith(f"value of label 'pod' is {dcgm.MAX_LABEL_VALUE_CHARS + 1} characters, "
                                       f"over the limit of {dcgm.MAX_LABEL_VALUE_CHARS}")
    assert batch.rows.equals(base.rows)


def test_a_label_value_at_the_limit_is_read():
    text = FIX.read_text()
    sample = next(line for line in text.splitlines() if line and not line.startswith("#") and 'pod=""' in line)
    at_limit = sample.replace('pod=""', 'pod="' + "p" * dcgm.MAX_LABEL_VALUE_CHARS + '"', 1)
    batch = dcgm.parse_text(at_limit + "\n", source="t", scraped_at=AT)
    assert batch.accepted == 1 and batch.rows["pod"][0] == "p" * dcgm.MAX_LABEL_VALUE_CHARS
