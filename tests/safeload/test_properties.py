"""Property tests (hypothesis): hostile or random input never ends in a traceback.

Requests and policies: random YAML text, random structures, and the example request or the
packaged policy with random values put at random places only ever validate or raise the
documented error (RequestError / PolicyError with one line per problem). DCGM text and FOCUS
rows: random lines and cells never raise, and rows in = accepted + quarantined.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.finops.feeds import dcgm, focus
from gpu_platform.policy import PolicyError, load_policy
from gpu_platform.policy.loading import default_policy_path, parse_policy_document
from gpu_platform.requests.model import RequestError, validate_request
from gpu_platform.safeload import POLICY_LIMITS, REQUEST_LIMITS, InputError, load_json_text, load_yaml_text
from tests.conftest import EXAMPLES, ROOT

EXAMPLE = yaml.safe_load((EXAMPLES / "release_eval.yaml").read_text())
POLICY_RAW = yaml.safe_load(default_policy_path().read_text())
POLICY = load_policy()
FOCUS_SAMPLE = (ROOT / "tests" / "fixtures" / "feeds" / "focus-1.0-sample.csv").read_text().splitlines()
FOCUS_HEADER = next(csv.reader([FOCUS_SAMPLE[0]]))
FOCUS_ROW = next(csv.reader([FOCUS_SAMPLE[1]]))
SCRAPED = datetime(2024, 9, 18, 12, tzinfo=UTC)

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["0s", "-1h", "1e-10", "1e308", "99999999999d", "PT4H", "\x00", "true", "lane_default", "sha256:", "any", "🙂" * 3])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _one_line_problems(errors: list[str]) -> None:
    assert errors
    assert all(isinstance(e, str) and "\n" not in e and len(e) < 2000 for e in errors), errors


def _request(raw) -> None:
    try:
        validate_request(raw, POLICY)
    except RequestError as exc:
        _one_line_problems(exc.errors)


@PROPS
@given(st.text(max_size=400))
def test_random_yaml_text_is_a_request_or_a_listed_problem(text):
    try:
        raw = load_yaml_text(text, "fuzz.yaml", REQUEST_LIMITS)
    except InputError as exc:
        _one_line_problems(exc.errors)
        return
    _request(raw)


@PROPS
@given(st.binary(max_size=300))
def test_random_json_bytes_are_a_request_or_a_listed_problem(data):
    try:
        raw = load_json_text(data.decode("utf-8", "replace"), "fuzz.json", REQUEST_LIMITS)
    except InputError as exc:
        _one_line_problems(exc.errors)
        return
    _request(raw)


@PROPS
@given(st.dictionaries(st.sampled_from(sorted(EXAMPLE) + ["bogus", ""]), values, min_size=1, max_size=4))
def test_the_example_request_with_random_values_never_crashes(changes):
    _request({**EXAMPLE, **changes})


@PROPS
@given(st.lists(st.tuples(st.integers(0, 10_000), values), min_size=1, max_size=3))
def test_the_policy_with_random_values_never_crashes(edits):
    raw = yaml.safe_load(yaml.safe_dump(POLICY_RAW))
    for where, value in edits:
        node = raw
        for _ in range(6):  # walk down a random path, then replace what is there
            if isinstance(node, dict) and node:
                key = sorted(node, key=str)[where % len(node)]
                if not isinstance(node[key], dict | list) or where % 3 == 0:
                    node[key] = value
                    break
                node = node[key]
            elif isinstance(node, list) and node:
                i = where % len(node)
                if not isinstance(node[i], dict | list) or where % 3 == 0:
                    node[i] = value
                    break
                node = node[i]
            else:
                break
            where //= 7
    try:
        parse_policy_document(raw, "fuzz-policy")
    except PolicyError as exc:
        _one_line_problems(exc.errors)
    try:
        load_yaml_text(yaml.safe_dump(raw), "fuzz-policy.yaml", POLICY_LIMITS)
    except InputError as exc:
        _one_line_problems(exc.errors)


dcgm_lines = st.one_of(
    st.text(max_size=120),
    st.builds(
        lambda name, gpu, value, ts: f'{name}{{gpu="{gpu}",UUID="GPU-1",Hostname="n1"}} {value}{ts}',
        st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "x y", "9bad"]),
        st.sampled_from(["0", "1", "", "-1", "a"]),
        st.sampled_from(["0", "55", "NaN", "+Inf", "9.2233720368547758e18", "1e309", "abc", ""]),
        st.sampled_from(["", " 1726660800000", " -5", " 99999999999999999999", " x"]),
    ),
)


@PROPS
@given(st.lists(dcgm_lines, max_size=30))
def test_dcgm_text_never_raises_and_counts_add_up(lines):
    batch = dcgm.parse_text("\n".join(lines).encode("utf-8", "surrogatepass"), source="fuzz.prom", scraped_at=SCRAPED)
    assert batch.rows_in == batch.accepted + batch.quarantined


cells = st.one_of(st.text(max_size=20), st.sampled_from(["NULL", "", "1e999", "-0", "2024-13-40 25:00:00", "{", "{}", "NaN"]))


@PROPS
@given(st.lists(st.dictionaries(st.integers(0, len(FOCUS_HEADER) - 1), cells, max_size=5), min_size=1, max_size=8),
       st.integers(0, 3))
def test_focus_rows_never_raise_and_counts_add_up(edits, duplicates):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(FOCUS_HEADER)
    for edit in edits:
        row = list(FOCUS_ROW)
        for i, v in edit.items():
            row[i] = v
        writer.writerow(row)
    for _ in range(duplicates):
        writer.writerow(FOCUS_ROW)
    data = out.getvalue().encode("utf-8", "surrogatepass")
    batch = focus.load_focus(data, source="fuzz.csv")
    assert batch.rows_in == batch.accepted + batch.quarantined == len(edits) + duplicates
