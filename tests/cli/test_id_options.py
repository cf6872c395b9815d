"""The request-id pattern wherever an id enters on the command line (issue 42, class 10): a
newline or control character in `k8s render --request-id`, `explain`, `approve`, `lineage`,
`retention hold` is refused with exit 2 before anything runs, and adds no YAML field."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.cli.common import EXAMPLES
from gpu_platform.requests.model import id_problem

FORGED = ["req-1\nmetadata:\n  name: pwned", "req-1\n", "req-\x1b[2J", "req\u202e1", "../../etc", "-rf", ""]


@pytest.mark.parametrize("bad", FORGED)
def test_k8s_render_refuses_a_forged_request_id(bad, tmp_path) -> None:
    result = CliRunner().invoke(
        main, ["k8s", "render", str(EXAMPLES / "candidate_train.yaml"), "--request-id", bad]
    )
    assert result.exit_code == 2, result.output
    assert "apiVersion" not in result.output and "Traceback" not in result.output


def test_k8s_render_refuses_a_forged_run_id() -> None:
    result = CliRunner().invoke(
        main, ["k8s", "render", str(EXAMPLES / "candidate_train.yaml"), "--run-id", "r1\nkind: Secret"]
    )
    assert result.exit_code == 2 and "apiVersion" not in result.output


def test_k8s_render_accepts_a_plain_request_id() -> None:
    result = CliRunner().invoke(
        main, ["k8s", "render", str(EXAMPLES / "candidate_train.yaml"), "--request-id", "req-plain.1:a/b"]
    )
    assert result.exit_code == 0, result.output
    assert "req-plain.1:a/b" in result.output


@pytest.mark.parametrize(
    "args",
    [["explain"], ["lineage"], ["approve"], ["retention", "hold"]],
)
def test_every_id_argument_is_checked(args, tmp_path) -> None:
    bad = "req-1\nAPPROVED by platform-lead"
    argv = [*args, bad]
    result = CliRunner().invoke(main, argv, env={"GPU_PLATFORM_HOME": str(tmp_path)})
    assert result.exit_code == 2, (args, result.output)
    assert "\nAPPROVED" not in result.output
    assert "not a valid id" in result.output


def test_id_problem_refuses_a_trailing_newline() -> None:
    # Python's `$` matches before a final newline: the pattern is applied with fullmatch
    assert id_problem("req-1\n") is not None
    assert id_problem("req-1") is None


def test_retention_hold_refuses_control_characters_in_holder_and_reason(tmp_path) -> None:
    result = CliRunner().invoke(
        main, ["retention", "hold", "req-1", "--holder", "ops\x1b[2J", "--reason", "x\nAPPROVED"],
        env={"GPU_PLATFORM_HOME": str(tmp_path)},
    )
    assert result.exit_code == 2, result.output
    assert "U+001B" in result.output and "U+000A" in result.output and "\x1b" not in result.output
