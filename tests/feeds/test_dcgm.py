from __future__ import annotations

import http.server
import json
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.finops.feeds import dcgm
from gpu_platform.finops.feeds.dcgm import (
    PrometheusQueryError,
    ScrapeError,
    parse_file,
    parse_label_block,
    parse_query_range,
    parse_text,
    read_history_parquet,
    scrape,
)
from gpu_platform.finops.feeds.schemas import (
    DCGM_QUARANTINE_SCHEMA,
    DCGM_SAMPLE_SCHEMA,
    FeedBatch,
    FeedSchemaError,
)

SENTINEL = "9223372036854775794"


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def scan_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both scans of parse_text: the compiled one (the C extension built
    at install) and the numpy one it falls back to without a compiler."""
    if request.param == "compiled" and dcgm._dcgm_scan is None:
        pytest.skip("needs the compiled DCGM scan (gpu_platform/finops/feeds/_dcgm_scan.c), which was not built: install a C compiler (apt install gcc) and run: make install")
    monkeypatch.setattr(dcgm, "SCAN_PATH", request.param)
    return request.param


def _data_lines(text: str) -> int:
    """Lines are separated by \\n only (the text format's rule); blanks are spaces, tabs, \\r."""
    stripped = (line.strip(" \t\r") for line in text.split("\n"))
    return sum(1 for line in stripped if line and not line.startswith("#"))


def _assert_invariant(batch: FeedBatch, text: str | None = None) -> None:
    assert batch.rows_in == batch.accepted + batch.quarantined
    if text is not None:
        assert batch.rows_in == _data_lines(text)
    lines = batch.rows["source_line"].to_list() + batch.quarantine["source_line"].to_list()
    assert len(lines) == len(set(lines)), "a line is both accepted and quarantined"
    assert dict(batch.rows.schema) == DCGM_SAMPLE_SCHEMA
    assert dict(batch.quarantine.schema) == DCGM_QUARANTINE_SCHEMA


def test_baremetal_sample(fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-metrics-baremetal.txt", source="bm", scraped_at=scraped_at)
    _assert_invariant(batch, (fixtures / "dcgm-metrics-baremetal.txt").read_text())
    assert batch.rows.select("metric", "value", "gpu", "source_line").rows() == [
        ("DCGM_FI_DEV_SM_CLOCK", 139.0, 0, 7),
        ("DCGM_FI_DEV_MEM_CLOCK", 405.0, 0, 8),
    ]
    assert batch.rows["uuid"].unique().to_list() == ["GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"]
    assert batch.rows["ts"].to_list() == [scraped_at, scraped_at]
    assert batch.rows["hostname"].null_count() == 2
    assert batch.rows["source"].unique().to_list() == ["bm"]
    q = batch.quarantine.row(0, named=True)
    assert q["source_line"] == 9
    assert q["raw"].startswith("DCGM_FI_DEV_MEMORY_TEMP{") and q["raw"].endswith(SENTINEL)
    assert q["reason"].startswith("line 9: ") and SENTINEL in q["reason"] and "sentinel" in q["reason"]


def test_k8s_unassigned_sample_empty_pod_labels_are_null(fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-metrics-k8s-unassigned.txt", scraped_at=scraped_at)
    _assert_invariant(batch, (fixtures / "dcgm-metrics-k8s-unassigned.txt").read_text())
    assert batch.accepted == 2 and batch.quarantined == 1
    assert batch.rows.select(pl.col("pod", "namespace", "container").null_count()).row(0) == (2, 2, 2)
    assert batch.rows["source"].to_list() == [str(fixtures / "dcgm-metrics-k8s-unassigned.txt")] * 2
    assert batch.quarantine["reason"].to_list()[0].startswith("line 7:")


def test_parse_file_defaults_scrape_time_to_mtime(fixtures: Path) -> None:
    path = fixtures / "dcgm-metrics-baremetal.txt"
    batch = parse_file(path)
    assert batch.rows["ts"][0] == datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)


def test_released_image_labels(fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-variant-released.txt", scraped_at=scraped_at)
    _assert_invariant(batch)
    row = batch.rows.row(1, named=True)
    assert row["metric"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert row["value"] == pytest.approx(0.812345)
    assert (
        row["hostname"],
        row["gpu"],
        row["uuid"],
        row["model_name"],
        row["pci_bus_id"],
        row["device"],
    ) == (
        "gpu-node-01",
        0,
        "GPU-11111111-2222-3333-4444-555555555555",
        "NVIDIA H100 80GB HBM3",
        "00000000:18:00.0",
        "nvidia0",
    )
    assert (row["namespace"], row["pod"], row["container"]) == (
        "team-perception",
        "train-run-42-worker-0",
        "trainer",
    )
    assert json.loads(row["extra_labels"]) == {
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "pod_uid": "0d0f6a4e-9a54-4c7e-8c6b-9c1f0f2f1a11",
    }
    assert row["gpu_instance_profile"] is None and row["gpu_instance_id"] is None


def test_old_namespace_labels(fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-variant-old-namespace.txt", scraped_at=scraped_at)
    _assert_invariant(batch, (fixtures / "dcgm-variant-old-namespace.txt").read_text())
    assert batch.rows.select("hostname", "uuid", "namespace", "pod", "container").unique().rows() == [
        (
            "gpu-node-02",
            "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            "team-labeling",
            "label-batch-7-0",
            "labeler",
        )
    ]
    assert batch.rows["value"].to_list() == [40536.0, 312.457]
    assert batch.rows["extra_labels"].null_count() == 2


def test_mig_labels(fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-variant-mig.txt", scraped_at=scraped_at)
    _assert_invariant(batch)
    assert batch.rows.select("gpu_instance_profile", "gpu_instance_id", "pod", "value").rows() == [
        ("1g.5gb", "7", "replay-3", 0.25),
        ("3g.20gb", "2", None, 0.0),
    ]


@pytest.mark.parametrize(
    ("labels", "column", "expected"),
    [
        ('Hostname="a"', "hostname", "a"),
        ('hostname="a"', "hostname", "a"),
        ('UUID="GPU-1"', "uuid", "GPU-1"),
        ('uuid="GPU-1"', "uuid", "GPU-1"),
        ('pod="p"', "pod", "p"),
        ('pod_name="p"', "pod", "p"),
        ('namespace="n"', "namespace", "n"),
        ('pod_namespace="n"', "namespace", "n"),
        ('container="c"', "container", "c"),
        ('container_name="c"', "container", "c"),
        ('GPU_I_PROFILE="2g.20gb"', "gpu_instance_profile", "2g.20gb"),
        ('GPU_I_ID="3"', "gpu_instance_id", "3"),
        ('modelName="Tesla T4"', "model_name", "Tesla T4"),
        ('pci_bus_id="00000000:00:1E.0"', "pci_bus_id", "00000000:00:1E.0"),
        ('device="nvidia3"', "device", "nvidia3"),
        ('gpu="3"', "gpu", 3),
        ('DCGM_FI_DRIVER_VERSION="535.1"', "extra_labels", '{"DCGM_FI_DRIVER_VERSION":"535.1"}'),
        ('Hostname="a",hostname="a"', "hostname", "a"),
        ('Hostname="",hostname="a"', "hostname", "a"),
        ('pod=""', "pod", None),
    ],
)
def test_every_label_variant(labels: str, column: str, expected: object, scraped_at: datetime) -> None:
    batch = parse_text(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 5\n", source="t", scraped_at=scraped_at)
    assert batch.quarantined == 0
    assert batch.rows[column].to_list() == [expected]


def test_malformed_lines_are_quarantined_with_line_numbers(fixtures: Path, scraped_at: datetime) -> None:
    text = (fixtures / "dcgm-malformed.txt").read_text()
    batch = parse_text(text, source="m", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    reasons = dict(
        zip(batch.quarantine["source_line"].to_list(), batch.quarantine["reason"].to_list(), strict=True)
    )
    assert reasons == {
        6: "line 6: unterminated label value (label 'UUID')",
        7: "line 7: invalid sample value 'forty'",
        8: "line 8: missing value",
        9: "line 9: invalid timestamp 'yesterday' (expected integer milliseconds)",
        10: "line 10: invalid metric name '9bad_name'",
        12: "line 12: value NaN is a blank (no data)",
        13: "line 13: value 9223372036854775807 is a DCGM blank sentinel (>= 9.2e18, no data)",
        14: "line 14: missing '}' after labels",
        15: "line 15: expected '=' after label name 'bad'",
        16: "line 16: duplicate label 'gpu'",
    }
    accepted = batch.rows.select("source_line", "gpu", "value").rows()
    assert accepted == [(3, 0, 41.0), (5, 1, 42.0), (11, 7, 47.0)]
    assert batch.quarantine.filter(pl.col("source_line") == 7)["raw"].to_list() == [
        'DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-3"} forty'
    ]


def test_escaped_quotes_commas_and_braces_in_label_values(scraped_at: datetime) -> None:
    text = 'm{gpu="0",modelName="A \\"quoted\\", {braced} name",pod="x\\\\y\\nz"} 1\n'
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    assert batch.quarantined == 0
    assert batch.rows["model_name"].to_list() == ['A "quoted", {braced} name']
    assert batch.rows["pod"].to_list() == ["x\\y\nz"]


def test_trailing_timestamp_overrides_scrape_time(scraped_at: datetime) -> None:
    text = 'm{gpu="0"} 1 1726617600000\nm{gpu="0"} 2\nm{gpu="0"} 3 -1000\n'
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    assert batch.rows["ts"].to_list() == [
        datetime(2024, 9, 18, 0, 0, tzinfo=UTC),
        scraped_at,
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]


def test_sentinels_and_non_finite_values(scraped_at: datetime) -> None:
    values = [
        SENTINEL,
        "9223372036854775792",
        "9.2e18",
        "NaN",
        "+Inf",
        "-Inf",
        "140737488355328",
        "9.1e18",
        "-5",
    ]
    text = "".join(f'm{{gpu="{i}"}} {v}\n' for i, v in enumerate(values))
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    assert batch.rows["value"].to_list() == [9.1e18, -5.0]
    assert batch.quarantine["source_line"].to_list() == [1, 2, 3, 4, 5, 6, 7]
    assert all(v in r for v, r in zip(values, batch.quarantine["reason"].to_list(), strict=False))


def test_conflicting_alias_labels_and_bad_gpu_are_quarantined(scraped_at: datetime) -> None:
    text = 'm{Hostname="a",hostname="b"} 1\nm{pod="p",pod_name="q"} 1\nm{gpu="x"} 1\nm{gpu="99999999999"} 1\n'
    reasons = parse_text(text, source="t", scraped_at=scraped_at).quarantine["reason"].to_list()
    assert reasons == [
        "line 1: conflicting labels Hostname='a' and hostname='b'",
        "line 2: conflicting labels pod='p' and pod_name='q'",
        "line 3: label gpu='x' is not an integer",
        "line 4: label gpu='99999999999' is not an integer",
    ]


def test_crlf_leading_blanks_no_labels_and_no_trailing_newline(scraped_at: datetime) -> None:
    text = '# c\r\nm{gpu="0"} 1\r\n  m{gpu="1"} 2\r\n   # indented comment\r\nup 1\r\n\r\nm{gpu="2"} 3'
    batch = parse_text(text.encode(), source="t", scraped_at=scraped_at)
    _assert_invariant(batch)
    assert batch.rows_in == 4
    assert batch.rows.select("metric", "gpu", "value", "source_line").rows() == [
        ("m", 0, 1.0, 2),
        ("m", 1, 2.0, 3),
        ("up", None, 1.0, 5),
        ("m", 2, 3.0, 7),
    ]


def test_non_ascii_lines_keep_order_and_values(scraped_at: datetime) -> None:
    text = 'm{gpu="0"} 1\nm{gpu="1",modelName="Tesla™ Ü"} 2\nm{gpu="2"} 3\n'
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    assert batch.rows.select("gpu", "model_name", "value").rows() == [
        (0, None, 1.0),
        (1, "Tesla™ Ü", 2.0),
        (2, None, 3.0),
    ]


def test_empty_and_comment_only_input(scraped_at: datetime) -> None:
    for text in ("", "# HELP x\n# TYPE x gauge\n", "\n\n"):
        batch = parse_text(text, source="t", scraped_at=scraped_at)
        assert (batch.rows_in, batch.accepted, batch.quarantined) == (0, 0, 0)
        assert dict(batch.rows.schema) == DCGM_SAMPLE_SCHEMA


def test_invalid_utf8_bytes_are_replaced_not_fatal(scraped_at: datetime) -> None:
    batch = parse_text(b'm{pod="caf\xe9"} 1\n', source="t", scraped_at=scraped_at)
    assert batch.rows["pod"].to_list() == ["caf\ufffd"]


def test_naive_scrape_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_text("m 1\n", source="t", scraped_at=datetime(2024, 1, 1))


def test_label_block_parser_errors() -> None:
    assert parse_label_block('a="1", b = "2",') == {"a": "1", "b": "2"}
    for block, message in [
        ('a="1" b="2"', "expected ','"),
        ("a=1", "not quoted"),
        ('a="x\\q"', "invalid escape"),
        ('a"x"', "expected '='"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_label_block(block)


def test_fast_and_slow_path_agree(scraped_at: datetime) -> None:
    fast = 'm{gpu="0",pod="a b",namespace="n"} 1.5 1726617600000\n'
    slow = 'm{gpu="0",pod="a b",namespace="n"}  1.5   1726617600000\n'
    a = parse_text(fast, source="t", scraped_at=scraped_at).rows
    b = parse_text(slow, source="t", scraped_at=scraped_at).rows
    assert a.height == 1 and a.equals(b)


label_value = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
sample = st.fixed_dictionaries(
    {
        "metric": st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "up"]),
        "gpu": st.integers(0, 15),
        "pod": label_value,
        "model": label_value,
        "value": st.floats(allow_nan=False, allow_infinity=False, min_value=-1e14, max_value=1e14),
        "ts": st.one_of(st.none(), st.integers(0, 4_000_000_000_000)),
    }
)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=150, deadline=None)
@given(st.lists(sample, min_size=1, max_size=20))
def test_round_trip_property(samples: list[dict]) -> None:
    at = datetime(2024, 9, 18, tzinfo=UTC)
    lines = []
    for s in samples:
        ts = "" if s["ts"] is None else f" {s['ts']}"
        lines.append(
            f'{s["metric"]}{{gpu="{s["gpu"]}",pod="{_escape(s["pod"])}",modelName="{_escape(s["model"])}"}}'
            f" {s['value']!r}{ts}\n"
        )
    batch = parse_text("".join(lines), source="prop", scraped_at=at)
    assert batch.quarantined == 0
    rows = batch.rows.to_dicts()
    assert len(rows) == len(samples)
    for s, r in zip(samples, rows, strict=True):
        assert r["metric"] == s["metric"] and r["gpu"] == s["gpu"]
        assert r["pod"] == (s["pod"] or None) and r["model_name"] == (s["model"] or None)
        assert r["value"] == s["value"] or (math.isclose(r["value"], s["value"]) and s["value"] == 0)
        expected_ts = at if s["ts"] is None else datetime.fromtimestamp(s["ts"] / 1000, tz=UTC)
        assert r["ts"] == expected_ts


line_text = st.text(alphabet='ab_:{}="\\, \t#019.eE+-NaInf\r\u00e9', max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(line_text, max_size=15))
def test_any_text_keeps_the_count_invariant(lines: list[str]) -> None:
    text = "\n".join(lines)
    batch = parse_text(text, source="fuzz", scraped_at=datetime(2024, 9, 18, tzinfo=UTC))
    _assert_invariant(batch, text)
    assert all(
        r.startswith(f"line {n}: ") for n, r in batch.quarantine.select("source_line", "reason").rows()
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            line_text,
            st.builds(
                lambda s: f'DCGM_X{{gpu="{s[0]}",pod="{_escape(s[1])}"}} {s[2]!r}',
                st.tuples(st.integers(0, 9), label_value, st.floats(allow_nan=False, allow_infinity=False)),
            ),
        ),
        max_size=12,
    )
)
def test_fast_path_agrees_with_the_tokenizer(lines: list[str]) -> None:
    """A leading blank sends a line through the character-level tokenizer; results must match."""
    at = datetime(2024, 9, 18, tzinfo=UTC)
    fast = parse_text("\n".join(lines), source="p", scraped_at=at)
    slow = parse_text("\n".join(" " + line for line in lines), source="p", scraped_at=at)
    assert fast.rows.equals(slow.rows)
    assert fast.quarantine["source_line"].to_list() == slow.quarantine["source_line"].to_list()
    assert fast.rows_in == slow.rows_in


def test_large_inputs_are_parsed_in_chunks_with_global_line_numbers(
    monkeypatch: pytest.MonkeyPatch, fixtures: Path, scraped_at: datetime
) -> None:
    text = (fixtures / "dcgm-malformed.txt").read_text() * 3
    whole = parse_text(text, source="t", scraped_at=scraped_at)
    monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._MAX_CHUNK", 100)
    chunked = parse_text(text, source="t", scraped_at=scraped_at)
    assert chunked.rows.equals(whole.rows)
    assert chunked.quarantine.equals(whole.quarantine)
    assert chunked.rows_in == whole.rows_in == 3 * 13


def test_query_range_json(fixtures: Path) -> None:
    batch = parse_query_range((fixtures / "query_range.json").read_text(), source="prom")
    _assert_invariant(batch)
    assert batch.rows_in == 5
    assert batch.rows.select("metric", "hostname", "uuid", "value", "ts").rows() == [
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gpu-node-01",
            "GPU-11111111-2222-3333-4444-555555555555",
            0.5,
            datetime(2024, 9, 18, tzinfo=UTC),
        ),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gpu-node-01",
            "GPU-11111111-2222-3333-4444-555555555555",
            0.75,
            datetime(2024, 9, 18, 0, 0, 15, 500000, tzinfo=UTC),
        ),
        (
            "DCGM_FI_DEV_MEMORY_TEMP",
            "gpu-node-02",
            "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            38.0,
            datetime(2024, 9, 18, 0, 0, 15, tzinfo=UTC),
        ),
    ]
    assert json.loads(batch.rows["extra_labels"][0]) == {"instance": "10.0.0.5:9400", "job": "dcgm-exporter"}
    assert batch.rows["pod"].to_list()[2] is None
    assert batch.quarantine["source_line"].to_list() == [3, 4]
    assert "NaN" in batch.quarantine["reason"][0] and SENTINEL in batch.quarantine["reason"][1]
    assert json.loads(batch.quarantine["raw"][1])["value"] == [1726617600, SENTINEL]


def test_query_range_accepts_a_dict_and_vector() -> None:
    doc = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"__name__": "up", "gpu": "2"}, "value": [1726617600, "1"]}],
        },
    }
    batch = parse_query_range(doc, source="prom")
    assert batch.rows.select("metric", "gpu", "value").rows() == [("up", 2, 1.0)]


def test_query_range_missing_name_is_quarantined() -> None:
    doc = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"gpu": "2"}, "values": [[1726617600, "1"]]}]},
    }
    batch = parse_query_range(doc, source="prom")
    assert batch.accepted == 0 and batch.quarantine["reason"].to_list() == [
        "line 1: invalid metric name None"
    ]


def test_query_range_error_status_is_a_clear_error() -> None:
    doc = {"status": "error", "errorType": "bad_data", "error": "invalid parameter 'query'"}
    with pytest.raises(PrometheusQueryError, match="bad_data.*invalid parameter"):
        parse_query_range(json.dumps(doc), source="prom")
    with pytest.raises(PrometheusQueryError, match="resultType 'scalar'"):
        parse_query_range(
            {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}, source="p"
        )


def test_parquet_history_round_trip(tmp_path: Path, fixtures: Path, scraped_at: datetime) -> None:
    batch = parse_file(fixtures / "dcgm-variant-released.txt", scraped_at=scraped_at)
    bad = batch.rows.head(1).with_columns(value=pl.lit(float(SENTINEL)))
    path = tmp_path / "history.parquet"
    pl.concat([batch.rows, bad]).write_parquet(path)
    history = read_history_parquet(path, source="hist")
    assert (history.rows_in, history.accepted, history.quarantined) == (3, 2, 1)
    assert history.rows.drop("source", "source_line").equals(batch.rows.drop("source", "source_line"))
    assert history.rows["source_line"].to_list() == [1, 2]
    assert (
        history.quarantine["reason"]
        .to_list()[0]
        .startswith("row 3: value 9.223372036854776e+18 is a DCGM blank sentinel")
    )


def test_parquet_history_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pl.DataFrame({"ts": [datetime(2024, 1, 1)], "metric": ["m"], "value": [1.0]}).write_parquet(path)
    with pytest.raises(FeedSchemaError) as info:
        read_history_parquet(path)
    assert info.value.missing == sorted(
        [
            "hostname",
            "gpu",
            "uuid",
            "model_name",
            "pci_bus_id",
            "device",
            "gpu_instance_profile",
            "gpu_instance_id",
            "namespace",
            "pod",
            "container",
        ]
    )
    assert "container" in str(info.value) and "gpu_instance_id" in str(info.value)


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter(fixtures: Path) -> Iterator[str]:
    handler = type("H", (_Handler,), {"body": (fixtures / "dcgm-metrics-k8s-unassigned.txt").read_bytes()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_scrape_local_exporter(exporter: str) -> None:
    before = datetime.now(UTC)
    batch = scrape(f"{exporter}/metrics", timeout=5)
    assert (batch.rows_in, batch.accepted, batch.quarantined) == (3, 2, 1)
    assert batch.rows["source"].unique().to_list() == [f"{exporter}/metrics"]
    assert before <= batch.rows["ts"][0] <= datetime.now(UTC)


def test_scrape_errors_name_the_url(exporter: str) -> None:
    with pytest.raises(ScrapeError, match="404"):
        scrape(f"{exporter}/nope", timeout=5)
    with pytest.raises(ScrapeError, match="only http and https"):
        scrape("file:///etc/passwd")
    with pytest.raises(ScrapeError, match="127.0.0.1:9"):
        scrape("http://127.0.0.1:9/metrics", timeout=2)


# --- the fast path against prometheus_client's parser and its own edges -----------------------

_PROM_LABELS = {
    "gpu": "gpu",
    "UUID": "uuid",
    "Hostname": "hostname",
    "modelName": "model_name",
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
}
prom_value = st.one_of(
    st.integers(-(10**12), 10**15).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e14, max_value=1e14).map(repr),
    st.floats(min_value=0, max_value=1).map(lambda v: f"{v:.3f}"),
    st.sampled_from(["NaN", "+Inf", "-Inf", SENTINEL, "140737488355328", "1e3", "0"]),
)
prom_line = st.fixed_dictionaries(
    {
        "metric": st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"]),
        "labels": st.dictionaries(
            st.sampled_from([*_PROM_LABELS, "DCGM_FI_DRIVER_VERSION", "err_code"]),
            st.text(alphabet='ab {}=,"\\\n|-_.0', max_size=10),
            max_size=5,
        ),
        "gpu": st.integers(0, 7),
        "value": prom_value,
        "ts": st.one_of(st.none(), st.integers(0, 4_000_000_000_000)),
        "sep": st.sampled_from([",", ", "]),
    }
)


def _prom_text(lines: list[dict]) -> str:
    out = []
    for i, s in enumerate(lines):
        if i % 4 == 0:
            out.append(f"# HELP {s['metric']} help text with {{braces}} and \"quotes\".\n# TYPE {s['metric']} gauge\n")
        labels = {"gpu": str(s["gpu"]), **{k: v for k, v in s["labels"].items() if k != "gpu"}}
        block = s["sep"].join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        ts = "" if s["ts"] is None else f" {s['ts']}"
        out.append(f"{s['metric']}{{{block}}} {s['value']}{ts}\n")
    return "".join(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(prom_line, min_size=1, max_size=25))
def test_agrees_with_prometheus_client(lines: list[dict]) -> None:
    """Every sample prometheus_client reads is accepted with the same name, labels, value and
    timestamp, or quarantined because its value is NaN, infinite or a DCGM blank."""
    from prometheus_client.parser import text_string_to_metric_families

    text = _prom_text(lines)
    at = datetime(2024, 9, 18, tzinfo=UTC)
    batch = parse_text(text, source="p", scraped_at=at)
    _assert_invariant(batch, text)
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert batch.rows_in == len(samples)
    rows = iter(batch.rows.to_dicts())
    reasons = iter(batch.quarantine["reason"].to_list())
    for s in samples:
        if math.isnan(s.value) or math.isinf(s.value) or s.value >= 9.2e18 or s.value in (2.0**47, 2.0**47 + 1):
            reason = next(reasons)
            assert "blank" in reason or "not a finite sample" in reason, reason
            continue
        r = next(rows)
        assert (r["metric"], r["value"]) == (s.name, s.value)
        expected_ts = at if s.timestamp is None else datetime.fromtimestamp(s.timestamp, tz=UTC)
        assert abs((r["ts"] - expected_ts).total_seconds()) < 1e-3
        for label, column in _PROM_LABELS.items():
            value = s.labels.get(label) or None
            assert r[column] == (int(value) if column == "gpu" and value is not None else value)
        extra = {k: v for k, v in s.labels.items() if k not in _PROM_LABELS}
        assert (json.loads(r["extra_labels"]) if r["extra_labels"] else {}) == extra
    assert next(rows, None) is None


def test_quoted_closing_brace_and_other_delimiters_in_label_values(scraped_at: datetime) -> None:
    text = (
        'm{a="x} 1",gpu="0"} 2\n'  # a quoted '}' followed by text that looks like a value
        'm{a="{|}",gpu="1"} 3\n'  # every delimiter byte inside quotes
        'm{a="x"}|{ 4\n'  # a '|' and '{' after the block: not a sample line
        'm{gpu="2"} 5 }\n'  # text after the value
    )
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    assert batch.rows.select("gpu", "value", "extra_labels").rows() == [
        (0, 2.0, '{"a":"x} 1"}'),
        (1, 3.0, '{"a":"{|}"}'),
    ]
    assert batch.quarantine["source_line"].to_list() == [3, 4]


@pytest.mark.parametrize("pad", range(0, 20))
def test_values_at_the_very_end_of_the_input(pad: int, scraped_at: datetime) -> None:
    """The last value (no newline after it) lies within the last 12 bytes of the buffer."""
    text = "#" + "x" * pad + '\nm{gpu="0"} 1\nm{gpu="1",pod="p"} 42.5'
    batch = parse_text(text.encode(), source="t", scraped_at=scraped_at)
    assert batch.rows.select("gpu", "pod", "value").rows() == [(0, None, 1.0), (1, "p", 42.5)]


def test_pieces_on_threads_match_one_piece(monkeypatch: pytest.MonkeyPatch, scraped_at: datetime) -> None:
    text = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i % 8}",pod="p{i % 5}"}} {i if i % 3 else SENTINEL}\n# c\n' for i in range(3000)
    )
    whole = parse_text(text, source="t", scraped_at=scraped_at)
    monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._MIN_PIECE", 1000)
    monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._workers", lambda: 3)
    pieces = parse_text(text, source="t", scraped_at=scraped_at)
    assert pieces.rows.equals(whole.rows)
    assert pieces.quarantine.equals(whole.quarantine)
    assert pieces.rows_in == whole.rows_in == 3000
    assert whole.quarantined == 1000


block_value = st.text(alphabet='ab =,{}"\\\n\t-_', max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "gpu", "pod", "Hostname", "hostname", "_x"]), block_value), max_size=5),
    st.sampled_from([",", ", ", " , ", ",\t"]),
    st.booleans(),
    st.sampled_from(["", " ", "x", ",,", '"']),
)
def test_simple_block_reader_agrees_with_the_block_parser(
    pairs: list[tuple[str, str]], sep: str, trailing: bool, junk: str
) -> None:
    from gpu_platform.finops.feeds.dcgm import LABEL_COLUMNS, _block_columns, _labels_to_columns

    block = sep.join(f'{k}="{_escape(v)}"' for k, v in pairs) + ("," if trailing else "") + junk
    try:
        expected = _labels_to_columns(parse_label_block(block))
    except ValueError as exc:
        expected = ({}, str(exc))
    if expected[1] is not None:
        expected = (dict.fromkeys((*LABEL_COLUMNS, "extra_labels")), expected[1])
    assert _block_columns(block) == expected


def _reference_feed(fixtures: Path, copies: int) -> str:
    """dcgm-exporter's README output (the two fixtures) replicated, as the DCGM benchmark reads it:
    HELP/TYPE comments before the sample lines, one sample line in three a blank sentinel."""
    names = ("dcgm-metrics-baremetal.txt", "dcgm-metrics-k8s-unassigned.txt")
    text = "".join((fixtures / name).read_text() for name in names)
    return text * copies


@pytest.mark.parametrize("pieces", [False, True])
def test_reference_feed_replicated_quarantines_every_sentinel_line(
    pieces: bool, fixtures: Path, scraped_at: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sentinel line of the replicated reference feed is quarantined with its own line number,
    raw text and reason (line numbers from 1 to 5 digits, across pieces when cut), every other
    sample line accepted with its value; the comments count for the line numbers only."""
    text = _reference_feed(fixtures, 800)
    if pieces:
        monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._MIN_PIECE", 1000)
        monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._MAX_PIECE", 7000)
        monkeypatch.setattr("gpu_platform.finops.feeds.dcgm._workers", lambda: 3)
    batch = parse_text(text.encode(), source="ref", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    lines = text.split("\n")
    blank_lines = [(n, line) for n, line in enumerate(lines, 1) if line.endswith(" " + SENTINEL)]
    kept = [
        (n, float(line.rsplit(" ", 1)[1]))
        for n, line in enumerate(lines, 1)
        if line and not line.startswith("#") and not line.endswith(SENTINEL)
    ]
    assert len(blank_lines) == 1600 and len(kept) == 3200 and batch.rows_in == 4800
    assert batch.quarantine.rows() == [
        ("ref", n, line, f"line {n}: value {SENTINEL} is a DCGM blank sentinel (>= 9.2e18, no data)")
        for n, line in blank_lines
    ]
    assert batch.rows.select("source_line", "value").rows() == kept
    assert batch.rows["metric"].unique().sort().to_list() == ["DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_SM_CLOCK"]
    assert batch.rows.filter(pl.col("source_line") == kept[-1][0])["uuid"].to_list() == [
        "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    ]


def test_blank_values_that_differ_or_end_the_input_keep_their_own_text(scraped_at: datetime) -> None:
    """Blank values quarantined together but with different texts (two int64 sentinels, a NaN
    at the very end of the input) each keep their own text in the reason."""
    values = [SENTINEL, "9223372036854775807", "7"] * 5
    lines = [f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i % 4}"}} {v}' for i, v in enumerate(values)]
    text = "\n".join([*lines, 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} NaN'])
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    reasons = batch.quarantine.select("source_line", "reason").rows()
    assert reasons[:2] == [
        (1, f"line 1: value {SENTINEL} is a DCGM blank sentinel (>= 9.2e18, no data)"),
        (2, "line 2: value 9223372036854775807 is a DCGM blank sentinel (>= 9.2e18, no data)"),
    ]
    assert reasons[-1] == (16, "line 16: value NaN is a blank (no data)")
    assert batch.rows["value"].to_list() == [7.0] * 5


def test_values_like_a_sentinel_are_read_as_the_tokenizer_reads_them(scraped_at: datetime) -> None:
    """Only 19 digits starting 92233720 are taken for an int64 sentinel without being cast; other
    long numbers, a sentinel with a timestamp or a non-digit in it are cast (or quarantined)
    exactly as the character-level tokenizer does, interleaved metrics or not."""
    values = [
        SENTINEL, "9199999999999999999", "92233720368547758x4", "922337203685477580", "92233720368547758070",
        f"{SENTINEL} 1726617600000", "1.5", "12", "1e3",
    ]
    names = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP"]
    for interleaved in (False, True):
        lines = [
            f'{names[i % 3] if interleaved else names[0]}{{gpu="{i % 2}",UUID="GPU-{i % 2}"}} {v}'
            for i, v in enumerate(values * 3)
        ]
        fast = parse_text("\n".join(lines), source="p", scraped_at=scraped_at)
        slow = parse_text("\n".join(" " + line for line in lines), source="p", scraped_at=scraped_at)
        assert fast.rows.equals(slow.rows)
        reasons = ("source_line", "reason")
        assert fast.quarantine.select(reasons).equals(slow.quarantine.select(reasons))
        assert fast.quarantined == 3 * 5


def test_sentinel_reasons_after_a_line_left_to_the_tokenizer(scraped_at: datetime) -> None:
    """A fast-path line whose timestamp does not parse goes to the tokenizer; the lines after it
    keep their own line numbers and reasons (a value over 9.2e18 that is not a sentinel's
    digits keeps its own text, though a sentinel with a bad label comes before it)."""
    lines = [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0"}} {SENTINEL}',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 1 soon',
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="x"}} {SENTINEL}',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 9.5e18',
        'DCGM_FI_DEV_GPU_TEMP{gpu="1"} 7',
    ]
    text = "\n".join(lines) + "\n"
    batch = parse_text(text, source="t", scraped_at=scraped_at)
    _assert_invariant(batch, text)
    assert batch.quarantine.select("source_line", "raw", "reason").rows() == [
        (1, lines[0], f"line 1: value {SENTINEL} is a DCGM blank sentinel (>= 9.2e18, no data)"),
        (2, lines[1], "line 2: invalid timestamp 'soon' (expected integer milliseconds)"),
        (3, lines[2], "line 3: label gpu='x' is not an integer"),
        (4, lines[3], "line 4: value 9.5e18 is a DCGM blank sentinel (>= 9.2e18, no data)"),
    ]
    assert batch.rows.select("source_line", "value").rows() == [(5, 7.0)]
