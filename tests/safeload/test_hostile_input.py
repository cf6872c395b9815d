"""Hostile input: every case refused with exit 2 and one line per problem, never a traceback.

The files are the ones a hostile user would write (billion laughs, 100,000 brackets, a 5,000
digit integer, Latin-1 / UTF-16 / binary bytes, duplicate keys); memory is measured with
tracemalloc while the loader refuses them.
"""

from __future__ import annotations

import tracemalloc
from decimal import Decimal

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import RequestError, load_request_file, validate_request
from gpu_platform.safeload import REQUEST_LIMITS, InputError, load_document
from tests.conftest import EXAMPLES

EXAMPLE = (EXAMPLES / "research_best_effort.yaml").read_text()


def _laughs(field: str) -> str:
    lines = ['l0: &l0 "lol"']
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    body = "\n".join(line for line in EXAMPLE.splitlines() if not line.startswith(f"{field}:"))
    return "\n".join(lines) + f"\n{field}: *l8\n" + body + "\n"


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _refused(result, *needles: str) -> list[str]:
    """Exit 2, no traceback; the problem lines (indented) contain every needle."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln.strip() for ln in result.output.splitlines() if ln.startswith("  ")]
    for needle in needles:
        assert any(needle in ln for ln in lines), (needle, result.output)
    return lines


@pytest.mark.parametrize("field", ["lane", "team"])
@pytest.mark.parametrize("command", ["validate", "submit"])
def test_billion_laughs_is_refused_fast_and_small(tmp_path, field, command):
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs(field))
    args = ["request", "validate", str(path)] if command == "validate" else [
        "submit", str(path), "--ledger", f"sqlite:///{tmp_path / 'l.db'}"]
    lines = _refused(_cli(*args), "expands to more than")
    assert len(lines) == 1 and len(lines[0]) < 300
    tracemalloc.start()
    with pytest.raises(InputError):
        load_document(path, REQUEST_LIMITS)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 5 * 1024 * 1024, f"peak {peak:,} bytes"
    if command == "submit":
        assert Ledger(f"sqlite:///{tmp_path / 'l.db'}").count() == (0, 0)


@pytest.mark.parametrize(
    "name, data, needle",
    [
        ("latin1.yaml", EXAMPLE.replace("ana@", "ané@").encode("latin-1"), "byte offset 9 (line 1): not UTF-8 (byte 0xe9"),
        ("utf16.yaml", EXAMPLE.encode("utf-16"), "byte offset 0: not UTF-8 (a UTF-16 (little-endian) byte order mark)"),
        ("binary.yaml", bytes(range(256)) * 4, "byte offset 0 (line 1): NUL byte"),
        ("gzip.json", b"\x1f\x8b\x08\x00\xa5\xb0" + b"\x00" * 20, "NUL byte"),
        ("random.yaml", b"owner: \xff\xfe\xfa\x81", "byte offset 7 (line 1): not UTF-8 (byte 0xff"),
    ],
)
def test_text_that_is_not_utf8_names_file_and_byte_offset(tmp_path, name, data, needle):
    path = tmp_path / name
    path.write_bytes(data)
    result = _cli("request", "validate", str(path))
    _refused(result, needle)
    assert str(path) in result.output


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("deep.yaml", "lane: " + "[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
        ("deep-map.yaml", "".join(" " * i + "a:\n" for i in range(200)) + " " * 200 + "b: 1\n", "nested deeper"),
        ("bigint.yaml", EXAMPLE.replace("gpu_count: 4", "gpu_count: " + "9" * 5000), "larger than 9223372036854775807"),
        ("bigint.json", '{"gpu_count": ' + "9" * 5000 + "}", "larger than 9223372036854775807"),
        ("recursive.yaml", "owner: &a [*a]\n", "recursive alias"),
        ("alias-depth.yaml", "\n".join(f"a{i}: &a{i} " + "[" * 20 + (f"*a{i - 1}" if i else "1") + "]" * 20
                                        for i in range(60)), "nested deeper than 32 levels once aliases are expanded"),
        ("nan.json", '{"max_cost": NaN}', "NaN is not a finite number"),
        ("inf.yaml", EXAMPLE.replace("max_cost: 400", "max_cost: .inf"), "'.inf' is not a finite number"),
        ("nul.yaml", EXAMPLE.replace("owner: ana@example.com", 'owner: "ana\\0@example.com"'), "NUL character"),
        ("huge.yaml", "owner: " + "x" * (REQUEST_LIMITS.max_bytes + 10), "larger than the limit of 262,144 bytes"),
    ],
)
def test_shapes_that_break_parsers_are_refused(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    _refused(_cli("request", "validate", str(path)), needle)


def test_duplicate_keys_name_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(EXAMPLE + "lane: release_eval\n")
    lines = _refused(_cli("request", "validate", str(path)), "duplicate key 'lane'")
    assert lines == [f"line {EXAMPLE.count(chr(10)) + 1}: duplicate key 'lane' (first at line 4)"]
    jpath = tmp_path / "dup.json"
    jpath.write_text('{"owner": "a",\n "env": {"A": "1", "A": "2"},\n "owner": "b"}')
    _refused(_cli("request", "validate", str(jpath)), "line 2: duplicate key 'A' (first at line 2)",
             "line 3: duplicate key 'owner' (first at line 1)")


def _errors(policy, **update) -> list[str]:
    raw = yaml.safe_load(EXAMPLE)
    raw.update(update)
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy)
    return exc.value.errors


def test_booleans_are_not_numbers(policy):
    assert "gpu_count: must be a number, not a boolean (true)" in _errors(policy, gpu_count=True)
    assert "max_cost: must be a number, not a boolean (false)" in _errors(policy, max_cost=False)


@pytest.mark.parametrize("field", ["expected_duration", "timeout", "checkpoint_interval"])
def test_durations_must_be_positive(policy, field):
    errors = _errors(policy, **{field: "0s"})
    assert f"{field}: must be a positive duration, not '0s'" in errors


def test_money_keeps_its_scale_or_is_refused(policy, sqlite_url):
    assert _errors(policy, max_cost=1e-10) == [
        "max_cost: 1E-10 has 10 decimal places; the ledger stores money to 6 (round it)"
    ]
    assert any("too large" in e for e in _errors(policy, max_cost="1e13"))
    raw = yaml.safe_load(EXAMPLE)
    raw["max_cost"] = 0.1
    req = validate_request(raw, policy)
    assert req.max_cost == Decimal("0.1")
    ledger = Ledger(sqlite_url)
    rid = ledger.submit(req)
    assert ledger.get(rid).max_cost == Decimal("0.1")


@pytest.mark.parametrize(
    "update, needle",
    [
        ({"owner": "o" * 201}, "owner: 201 characters exceed the limit of 200"),
        ({"owner": "ana\x00@example.com"}, "owner: NUL character in a string"),
        ({"experiment_id": "e" * 1025}, "experiment_id: 1025 characters exceed the limit of 1024"),
        ({"command": ["python", "x" * 5000]}, "command: item 1: 5000 characters exceed the limit of 4096"),
        ({"env": {"BAD NAME": "1"}}, "is not an environment variable name"),
        ({"lane": "l" * 65}, "lane: 65 characters exceed the limit of 64"),
    ],
)
def test_string_limits_are_the_ledgers(policy, update, needle):
    assert any(needle in e for e in _errors(policy, **update)), _errors(policy, **update)


def test_unknown_values_are_echoed_short(policy):
    errors = _errors(policy, lane="x" * 60, team=["a"] * 500)
    assert all(len(e) < 400 for e in errors), errors


def test_launchpad_config_is_bounded_too(policy):
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]
    raw = yaml.safe_load(EXAMPLE)
    raw["env"] = deep
    with pytest.raises(RequestError) as exc:
        validate_request(raw, policy, source="run config")
    assert exc.value.errors == ["env.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a: nested deeper than 32 levels"]


def test_a_valid_file_still_loads(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("defaults: &d {gpu_count: 4}\n" + EXAMPLE)
    assert load_request_file(path)["defaults"] == {"gpu_count": 4}


def test_policy_files_are_read_by_the_same_loader(tmp_path):
    policy_text = (EXAMPLES.parents[1] / "gpu_platform" / "policy" / "default.yaml").read_text()
    dup = tmp_path / "dup.yaml"
    dup.write_text(policy_text + "currency: EUR\n")
    _refused(_cli("policy", "check", str(dup)), "duplicate key 'currency'")
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(_laughs("currency"))
    _refused(_cli("policy", "check", str(laughs)), "expands to more than")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(policy_text.encode() + "# café\n".encode("latin-1"))
    _refused(_cli("policy", "check", str(latin)), "not UTF-8")


@pytest.mark.postgres
def test_longest_valid_strings_fit_both_ledgers(policy, ledger_url):
    raw = yaml.safe_load(EXAMPLE)
    raw.update(owner="o" * 200, request_id="r" * 200, max_cost="0.000001")
    req = validate_request(raw, policy)
    ledger = Ledger(ledger_url)
    assert ledger.submit(req) == "r" * 200
    stored = ledger.get("r" * 200)
    assert stored.owner == "o" * 200 and stored.max_cost == Decimal("0.000001")


def test_case_files_are_read_by_the_same_loader(tmp_path):
    laughs = tmp_path / "cases.yaml"
    laughs.write_text(_laughs("cases"))
    _refused(_cli("admit", "--cases", str(laughs)), "expands to more than")


def test_an_unreachable_ledger_is_one_line_without_the_password(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(EXAMPLE)
    result = CliRunner().invoke(
        main, ["submit", str(path), "--ledger", "postgresql+psycopg2://gp:hunter2-s3cret@127.0.0.1:1/gp"]
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output and "s3cret" not in result.output
    assert result.output.strip().startswith("ledger unavailable: OperationalError")


def test_feed_files_are_checked_for_utf8_in_chunks(tmp_path):
    from gpu_platform.safeload import check_utf8_file

    ok = tmp_path / "ok.csv"
    ok.write_bytes(("é" * 10).encode())  # 2-byte characters straddle every 3-byte chunk boundary
    assert check_utf8_file(ok, chunk=3) is None
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"abcdef" + "é".encode("latin-1") + b"xyz")
    assert check_utf8_file(bad, chunk=4) == "byte offset 6: not UTF-8 (byte 0xe9: invalid continuation byte)"
    cut = tmp_path / "cut.csv"
    cut.write_bytes(b"ab" + "é".encode()[:1])
    assert check_utf8_file(cut, chunk=2).startswith("byte offset 2: not UTF-8")


@pytest.mark.parametrize("value", ["1e308", "99999999999d", "P99999999999999W", 10**400, float("nan")])
def test_durations_that_overflow_are_problems_not_tracebacks(policy, value):
    errors = _errors(policy, timeout=value)
    assert any(e.startswith("timeout: ") for e in errors), errors


def test_aliases_cannot_build_depth_the_file_does_not_show(tmp_path):
    # 60 anchors of 30 brackets, each holding the previous one: 1,800 levels once expanded, within
    # the policy's node limit; refused before anything walks it.
    path = tmp_path / "deep-aliases.yaml"
    path.write_text("\n".join(f"a{i}: &a{i} " + "[" * 30 + (f"*a{i - 1}" if i else "1") + "]" * 30 for i in range(60)))
    _refused(_cli("policy", "check", str(path)), "nested deeper than 32 levels once aliases are expanded")
