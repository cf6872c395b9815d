"""The Launchpad refuses control and bidi characters like the CLI (issue 42, class 7), and its
failure's `problems` markdown cannot be closed by a backtick in a value (class 8)."""

from __future__ import annotations

import dagster as dg
from markdown_it import MarkdownIt

from assets.gate import submit_request
from assets.submit import EXAMPLE


def _failure(env, **config) -> dg.Failure | None:
    instance, ledger, resources, _ = env
    result = submit_request.execute_in_process(
        run_config={"ops": {"submit_request_op": {"config": {**EXAMPLE, **config}}}},
        resources={"ledger": resources["ledger"], "policy": resources["policy"]},
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    assert ledger.states() == []
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.user_failure_data


def test_a_launchpad_owner_with_escape_or_bidi_is_refused_naming_the_code_point(env):
    data = _failure(env, owner="ana\x1b[2J@example.com", team="perc\u202eption")
    problems = data.metadata["problems"].value
    assert "U+001B" in problems and "U+202E" in problems and "\x1b" not in problems


def test_a_backtick_in_a_value_does_not_close_its_code_span(env):
    data = _failure(env, team="x`](http://evil.example)`[y](javascript:alert(1))")
    html = MarkdownIt("commonmark").render(data.metadata["problems"].value)
    assert "<a " not in html and "<img" not in html
