"""dcgm-exporter series as Prometheus' ``/federate`` writes them: a timestamp on every sample, one
label block per GPU (labels sorted, ``instance`` and ``job`` added), values as Go's shortest float
text (up to 17 significant digits, ``e+06`` past a million). Both scans read them alike and exactly
(each value the correctly rounded number of its text, as Python's ``float`` reads it), and the
line bound is applied by both scans alike wherever an overlong line sits.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.finops.feeds import dcgm
from gpu_platform.finops.feeds.schemas import FeedBatch

AT = datetime(2024, 9, 18, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
needs_compiled = pytest.mark.skipif(
    dcgm._dcgm_scan is None,
    reason="needs the compiled DCGM scan (gpu_platform/finops/feeds/_dcgm_scan.c), which was not built: "
    "install a C compiler (apt install gcc) and run: make install",
)
SAMPLE = re.compile(r"^(\S+)\{(.*)\} (\S+) (\S+)$")


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_dcgm_parse
    finally:
        sys.path.pop(0)
    return bench_dcgm_parse


def _parse(text: str, path: str, monkeypatch: pytest.MonkeyPatch, pieces: bool) -> FeedBatch:
    with monkeypatch.context() as m:
        m.setattr(dcgm, "SCAN_PATH", path)
        if pieces:
            m.setattr(dcgm, "_MIN_PIECE", 64)
            m.setattr(dcgm, "_MAX_PIECE", 256)
            m.setattr(dcgm, "_workers", lambda: 3)
        return dcgm.parse_text(text.encode(), source="s", scraped_at=AT)


def _both(text: str, monkeypatch: pytest.MonkeyPatch, pieces: bool) -> FeedBatch:
    numpy_batch = _parse(text, "numpy", monkeypatch, pieces)
    if dcgm._dcgm_scan is None:
        return numpy_batch
    compiled = _parse(text, "compiled", monkeypatch, pieces)
    assert compiled.rows_in == numpy_batch.rows_in
    assert compiled.rows.equals(numpy_batch.rows)
    assert compiled.quarantine.equals(numpy_batch.quarantine)
    bits = [b.rows["value"].to_numpy().view(np.uint64) for b in (compiled, numpy_batch)]
    assert np.array_equal(bits[0], bits[1])
    return compiled


def _bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


@pytest.mark.parametrize("pieces", [False, True])
def test_federated_series_read_exactly_on_both_scans(pieces: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _bench().federate(n_gpus=16, scrapes=3)
    batch = _both(text, monkeypatch, pieces)
    lines = [SAMPLE.match(line) for line in text.splitlines() if not line.startswith("#")]
    assert batch.quarantined == 0 and batch.accepted == len(lines) == 16 * 20 * 3
    rows = batch.rows.sort("source_line")
    assert _bits(rows["value"].to_list()) == _bits([float(m.group(3)) for m in lines])
    want_ts = [datetime.fromtimestamp(int(m.group(4)) / 1000, tz=UTC) for m in lines]
    assert rows["ts"].to_list() == want_ts
    assert rows["metric"].to_list() == [m.group(1) for m in lines]
    # the scrape target's labels are kept, not dropped; the GPU's are columns
    first = rows.row(0, named=True)
    assert '"instance":"10.4.0.2:9400"' in first["extra_labels"] and '"job":"dcgm-exporter"' in first["extra_labels"]
    assert (first["hostname"], first["gpu"]) == ("gpu-node-000", 0)
    assert any("e+" in m.group(3) for m in lines) and any(len(m.group(3).replace(".", "")) >= 16 for m in lines)


def test_federated_series_read_as_prometheus_client_reads_them() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = _bench().federate(n_gpus=8, scrapes=2)
    theirs = [
        (s.name, s.value, round(s.timestamp * 1000))
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]
    rows = dcgm.parse_text(text, source="s", scraped_at=AT).rows.sort("source_line")
    ours = [
        (r["metric"], r["value"], round(r["ts"].timestamp() * 1000))
        for r in rows.iter_rows(named=True)
    ]
    assert len(ours) == 8 * 20 * 2 and sorted(ours) == sorted(theirs)


HALFWAY = [
    # text, the correctly rounded binary64 (ties to even where the text is exactly halfway)
    ("9007199254740993", 9007199254740992.0),
    ("9007199254740995", 9007199254740996.0),
    ("9007199254740993.5", 9007199254740994.0),
    ("18014398509481986", 18014398509481984.0),
    ("18014398509481990", 18014398509481992.0),
    ("1.8014398509481990e+16", 18014398509481992.0),
    ("4611686018427388416", 4611686018427387904.0),
    ("4611686018427388417", 4611686018427388928.0),
    ("0.30000000000000004", 0.30000000000000004),
    ("84.30637193826486", 84.30637193826486),
    ("6.088634523481149e+11", 608863452348.1149),
    ("1.7976931348623157e-05", 1.7976931348623157e-05),
    ("4.9406564584124654e-22", 4.9406564584124654e-22),
    ("9999999999999999999e-22", 9.999999999999999999e-4),
    ("1234567890123456789e-5", 12345678901234.56789),
]


@pytest.mark.parametrize("pieces", [False, True])
def test_long_mantissas_are_rounded_once_to_nearest_even(pieces: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "".join(f'm{{gpu="{i % 8}"}} {t} {1726617600000 + i}\n' for i, (t, _) in enumerate(HALFWAY))
    batch = _both(text, monkeypatch, pieces)
    assert batch.quarantined == 0
    assert _bits(batch.rows.sort("source_line")["value"].to_list()) == _bits([v for _, v in HALFWAY])
    assert _bits([v for _, v in HALFWAY]) == _bits([float(t) for t, _ in HALFWAY])


long_decimal = st.builds(
    lambda digits, point, exp: (digits[:point] + "." + digits[point:] if 0 < point < len(digits) else digits)
    + (f"e{exp:+d}" if exp else ""),
    st.integers(10**15, 10**19 - 1).map(str),
    st.integers(0, 19),
    st.integers(-22, 22),
)


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(long_decimal, min_size=1, max_size=30))
def test_compiled_scan_reads_16_to_19_digit_decimals_as_float_does(
    monkeypatch: pytest.MonkeyPatch, texts: list[str]
) -> None:
    text = "".join(f'm{{gpu="0"}} {t} 1726617600000\n' for t in texts)
    batch = _parse(text, "compiled", monkeypatch, False)
    want = [float(t) for t in texts if float(t) < dcgm.BLANK_THRESHOLD]  # above: DCGM's blanks
    got = batch.rows.sort("source_line")["value"].to_list()
    assert len(got) == len(want) and _bits(got) == _bits(want)
    assert batch.quarantined == len(texts) - len(want)


@pytest.mark.parametrize("pieces", [False, True])
def test_line_bound_is_the_same_on_both_scans_wherever_the_line_sits(
    pieces: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dcgm, "MAX_LINE_BYTES", 100)
    ok = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",instance="a:9400",job="dcgm"} 42 1726617600000'
    long = 'DCGM_FI_DEV_GPU_UTIL{gpu="1",pod="' + "p" * 120 + '"} 7 1726617600000'
    lines = [
        ok,
        long,
        "  # HELP " + "h" * 200,  # an overlong comment is dropped, not quarantined
        " " * 210 + "# HELP",  # not a comment within the text kept (200 bytes): quarantined
        " " * 150,  # blanks only, over the bound: quarantined like any other line
        ok + "\r",
        long + "\r",
        ok,
        long,  # the last line, without a newline
    ]
    batch = _both("\n".join(lines), monkeypatch, pieces)
    assert batch.rows["source_line"].to_list() == [1, 6, 8]
    assert batch.rows_in == 3 + 5
    got = batch.quarantine.select("source_line", "reason").rows()
    assert got == [
        (2, f"line 2: line is {len(long)} bytes, over the limit of 100"),
        (4, "line 4: line is 216 bytes, over the limit of 100"),
        (5, "line 5: line is 150 bytes, over the limit of 100"),
        (7, f"line 7: line is {len(long) + 1} bytes, over the limit of 100"),
        (9, f"line 9: line is {len(long)} bytes, over the limit of 100"),
    ]
    # the text kept is the line's own first 200 bytes, never the next line's
    assert batch.quarantine["raw"][0] == long[:200] + f"... ({len(long)} bytes)"
    assert all(len(raw) < 300 for raw in batch.quarantine["raw"].to_list())
