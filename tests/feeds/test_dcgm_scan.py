"""The compiled scan of the DCGM parser gives exactly what its numpy fallback gives.

Both scans of ``parse_text`` run on the same generated text (odd lines, escapes in label values,
CRLF, no trailing newline, huge lines, sentinels, NaN/Inf, timestamps, values the compiled scan
leaves to the cast), in one piece and cut into pieces on threads: the frames, the quarantine and
the line count must be identical, values bit for bit. The text is also checked against
prometheus_client where it is well-formed (tests/feeds/test_dcgm.py runs every parser test on both
scans).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.finops.feeds import dcgm, dcgm_labels
from gpu_platform.finops.feeds.schemas import FeedBatch

pytestmark = pytest.mark.skipif(
    dcgm._dcgm_scan is None, reason="needs the compiled DCGM scan (gpu_platform/finops/feeds/_dcgm_scan.c), which was not built: install a C compiler (apt install gcc) and run: make install"
)

AT = datetime(2024, 9, 18, 12, 0, tzinfo=UTC)
SENTINEL = "9223372036854775794"
ROOT = Path(__file__).resolve().parents[2]


def _parse(text: str | bytes, path: str, monkeypatch: pytest.MonkeyPatch, pieces: bool) -> FeedBatch:
    with monkeypatch.context() as m:
        m.setattr(dcgm, "SCAN_PATH", path)
        if pieces:
            m.setattr(dcgm, "_MIN_PIECE", 64)
            m.setattr(dcgm, "_MAX_PIECE", 256)
            m.setattr(dcgm, "_workers", lambda: 3)
        return dcgm.parse_text(text, source="s", scraped_at=AT)


def _assert_same(text: str | bytes, monkeypatch: pytest.MonkeyPatch, pieces: bool = False) -> FeedBatch:
    numpy_batch = _parse(text, "numpy", monkeypatch, pieces)
    compiled = _parse(text, "compiled", monkeypatch, pieces)
    assert compiled.rows_in == numpy_batch.rows_in
    assert compiled.rows.equals(numpy_batch.rows)
    assert compiled.quarantine.equals(numpy_batch.quarantine)
    # bit for bit (equals takes -0.0 for 0.0)
    bits = [b.rows["value"].to_numpy().view(np.uint64) for b in (compiled, numpy_batch)]
    assert np.array_equal(bits[0], bits[1])
    return compiled


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


decimal = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-", "+"]),
    st.sampled_from(["", "0", "00", "1", "7", "42", "123456789", "9007199254740993", "12345678901234567890"]),
    st.sampled_from(["", ".", ".0", ".5", ".125", ".000001", ".3333333333333333", ".1234567890123456789"]),
    st.sampled_from(["", "e0", "e5", "E-3", "e+22", "e22", "e23", "e-22", "e-23", "e308", "e400", "e-400", "e"]),
)
value_text = st.one_of(
    decimal,
    st.integers(-(10**19), 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=0, max_value=100).map(lambda v: f"{v:.3f}"),
    st.sampled_from([
        SENTINEL, "9223372036854775807", "92233720368547758x4", "922337203685477580", "92233720368547758070",
        "9199999999999999999", "140737488355328", "140737488355331.0", "9.2e18", "NaN", "nan", "+Inf", "-Inf",
        "inf", "Infinity", "-0", "-0.0", "0x10", "1_000", ".", "-", "1e", "forty", "1.5é", "é", "", "1,5",
    ]),
)
ts_text = st.one_of(
    st.integers(-(10**15), 10**15).map(str),
    st.sampled_from(["1726617600000", "+1726617600000", "-1000", "0", "1234567890123456789", "soon", "1.5", "", "1e3"]),
)
label_text = st.text(alphabet='ab {}|=,"\\\n\té™-_.0', max_size=10)
sample_line = st.builds(
    lambda name, labels, sep, value, ts, gap, cr: (
        f"{name}{{{sep.join(f'{k}={chr(34)}{_escape(v)}{chr(34)}' for k, v in labels.items())}}}"
        f"{gap}{value}{'' if ts is None else ' ' + ts}{cr}"
    ),
    st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "up", "m:x", "9bad", "a|b", ""]),
    st.dictionaries(
        st.sampled_from(["gpu", "UUID", "Hostname", "hostname", "pod", "modelName", "err_code"]), label_text, max_size=4
    ),
    st.sampled_from([",", ", ", " , "]),
    value_text,
    st.one_of(st.none(), ts_text),
    st.sampled_from([" ", " ", " ", "  ", "\t", ""]),
    st.sampled_from(["", "", "\r", "\r\r", " "]),
)
odd_line = st.one_of(
    st.text(alphabet='ab_:{}|="\\, \t#019.eE+-NaInf\r\u00e9', max_size=40),
    st.sampled_from([
        "", "# HELP m help {with} braces", "# TYPE m gauge", "  # indented", "\r", "up 1", "up{} 2", " m{gpu=\"0\"} 1",
        "{gpu=\"0\"} 1", 'm{gpu="0"}} 1', 'm{gpu="0"} 1 }', 'm{a="x"}|{ 4', 'm{gpu="0"} 1 2 3', "m{gpu=\"0\"} 1\t2",
    ]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(sample_line, sample_line, odd_line), max_size=20), st.booleans(), st.booleans())
def test_compiled_scan_gives_what_the_numpy_scan_gives(
    monkeypatch: pytest.MonkeyPatch, lines: list[str], trailing_newline: bool, pieces: bool
) -> None:
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    _assert_same(text.encode(), monkeypatch, pieces)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(value_text, st.one_of(st.none(), ts_text)), min_size=1, max_size=30))
def test_values_read_by_the_compiled_scan_are_the_casts_values(
    monkeypatch: pytest.MonkeyPatch, values: list[tuple[str, str | None]]
) -> None:
    """Every value and timestamp text on a well-shaped line: what the compiled scan reads itself
    (plain decimal numbers) must be the number the numpy path's cast gives, bit for bit."""
    text = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i % 4}"}} {v}{"" if t is None else " " + t}\n' for i, (v, t) in enumerate(values)
    )
    _assert_same(text, monkeypatch)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(0, 17))
def test_exact_decimal_reading_matches_polars(value: float, digits: int) -> None:
    """The compiled scan's reading of decimal texts (the fast path of its float reader) against
    polars' cast on the same texts, bit for bit."""
    texts = [repr(value), f"{value:.{digits}f}", f"{value:.{digits}e}", f"{abs(value):.{digits}g}"]
    text = "".join(f'm{{gpu="0"}} {t}\n' for t in texts)
    expected = pl.Series(texts).cast(pl.Float64, strict=False)
    batch = dcgm.parse_text(text, source="s", scraped_at=AT)
    got = dict(zip(batch.rows["source_line"].to_list(), batch.rows["value"].to_list(), strict=True))
    got_q = set(batch.quarantine["source_line"].to_list())
    for i, want in enumerate(expected.to_list(), 1):
        if i in got:
            assert np.float64(got[i]).view(np.uint64) == np.float64(want).view(np.uint64), texts[i - 1]
        else:
            assert i in got_q


def test_huge_lines_crlf_and_no_trailing_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    # the scan itself on lines and labels far beyond dcgm-exporter's (the input bounds lifted;
    # tests/feeds/test_dcgm_bounds.py checks the bounds)
    monkeypatch.setattr(dcgm, "MAX_LINE_BYTES", 1 << 30)
    monkeypatch.setattr(dcgm_labels, "MAX_LABEL_VALUE_CHARS", 1 << 30)
    big = "x" * 200_000
    lines = [
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",pod="{big}"}} 1.5\r',
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",pod="{big}\\"}}"}} 2 1726617600000\r',
        f"# HELP {big}",
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="2"}} {"1" * 5000}',
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="3"}} {SENTINEL}\r',
        f"{big} 1",
        'DCGM_FI_DEV_GPU_UTIL{gpu="4"} 7',
    ]
    text = "\n".join(lines)
    for pieces in (False, True):
        batch = _assert_same(text, monkeypatch, pieces)
        assert batch.rows.select("gpu", "value").rows() == [(0, 1.5), (1, 2.0), (None, 1.0), (4, 7.0)]
        assert batch.rows["pod"].to_list()[:2] == [big, big + '"}']
        assert batch.quarantine.select("source_line", "reason").rows() == [
            (4, f"line 4: value {'1' * 5000} is not a finite sample"),
            (5, f"line 5: value {SENTINEL} is a DCGM blank sentinel (>= 9.2e18, no data)"),
        ]


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_dcgm_parse
    finally:
        sys.path.pop(0)
    return bench_dcgm_parse


@pytest.mark.parametrize("pieces", [False, True])
def test_benchmark_inputs_parse_the_same(pieces: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's two inputs, small: generated clean text and the reference feed replicated."""
    bench = _bench()
    clean = bench.generate(n_gpus=32, scrapes=3)
    _assert_same(clean.encode(), monkeypatch, pieces)
    reference = bench.reference(3000)
    batch = _assert_same(reference.encode(), monkeypatch, pieces)
    assert batch.quarantined == batch.rows_in // 3


def test_without_the_extension_the_numpy_scan_is_used() -> None:
    """A machine that could not build the extension installs anyway and parses with numpy."""
    code = (
        "import sys; sys.modules['gpu_platform.finops.feeds._dcgm_scan'] = None\n"
        "from datetime import UTC, datetime\n"
        "from gpu_platform.finops.feeds import dcgm\n"
        "assert dcgm.SCAN_PATH == 'numpy', dcgm.SCAN_PATH\n"
        "b = dcgm.parse_text('m{gpu=\"0\"} 1.5\\n', source='s', scraped_at=datetime(2024, 1, 1, tzinfo=UTC))\n"
        "assert b.rows['value'].to_list() == [1.5]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert dcgm.SCAN_PATH == "compiled"


def test_scan_helpers_refuse_bad_arguments() -> None:
    scan = dcgm._dcgm_scan
    with pytest.raises(TypeError):
        scan.views(b"abc", np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError):
        scan.views(b"abc", np.array([2], dtype=np.int64), np.array([5], dtype=np.int64))
    offsets, text = scan.numbered(np.array([0, 7, 12345, -3], dtype=np.int64), b"line ", b": x")
    assert bytes(text) == b"line 0: xline 7: xline 12345: xline -3: x"
    assert np.frombuffer(offsets, dtype=np.int64).tolist() == [0, 9, 18, 31, 41]
