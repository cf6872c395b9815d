"""Every case in the shared Kueue/lane case files and in our platform.yaml passes, via the CLI too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.admission.cases import load_cases, run_case
from gpu_platform.cli.admission import admit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "admission"
SHARED = (
    "kueue.yaml",
    "lanes.yaml",
    "kueue-hierarchical.yaml",
    *sorted(f"kueue-random/{p.name}" for p in (FIXTURES / "kueue-random").glob("*.yaml")),
)
FILES = (*SHARED, "kueue-ordering.yaml", "kueue-afs.yaml", "platform.yaml", "team-limits.yaml", "cluster-observed.yaml", "gang.yaml", "tas.yaml")
CASES = [(f, c) for f in FILES for c in load_cases(FIXTURES / f)]


@pytest.mark.parametrize(("file", "case"), CASES, ids=[c["id"] for _, c in CASES])
def test_case(file: str, case: dict) -> None:
    outcome = run_case(case)
    assert outcome.ok, f"{file} {outcome.id}: {outcome.failures}\n{json.dumps(outcome.output, indent=1)}"


def test_shared_files_are_unchanged_copies_when_reference_present() -> None:
    ref = Path(__file__).resolve().parents[3] / "shared" / "reference" / "admission-cases"
    if not ref.exists():
        pytest.skip("needs the shared reference checked out beside the repository (../shared/reference)")
    for name in (*SHARED, "README.md"):
        assert (FIXTURES / name).read_text() == (ref / name).read_text(), name


def test_every_platform_rule_has_a_case() -> None:
    ids = " ".join(c["id"] for c in load_cases(FIXTURES / "platform.yaml"))
    for word in (
        "flavor",
        "borrow",
        "lending",
        "lower-or-newer-equal",
        "fill-back",
        "threshold",
        "overcommit",
        "overlapping",
        "fair-sharing",
        "yields-to",
        "evidence",
        "protected",
        "spot",
        "budget",
        "positions",
        "estimated-start",
        "strict-fifo",
        "mig",
        "best-effort-fifo",
    ):
        assert word in ids, word


CLI_FILES = (
    "kueue.yaml",
    "lanes.yaml",
    "kueue-hierarchical.yaml",
    "kueue-random/stable-200-seed21.yaml",
    "platform.yaml",
    "cluster-observed.yaml",
    "tas.yaml",
)


@pytest.mark.parametrize("name", CLI_FILES)
def test_cli_admit_passes_and_prints_json_per_case(name: str) -> None:
    res = CliRunner().invoke(admit, ["--cases", str(FIXTURES / name)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(load_cases(FIXTURES / name))
    for out in lines:
        assert {"id", "admitted", "preempted", "pending"} <= set(out)
        for p in out["preempted"]:
            assert set(p) >= {"name", "reason"}
        for p in out["pending"]:
            assert set(p) >= {"name", "reason"}
        if name.startswith("kueue-random/stable"):
            assert out["n_cycles"] == len(out["cycles"]) >= 1
            assert {"final_admitted", "evicted_finished"} <= set(out)


def test_cli_admit_fails_on_unmet_expectation(tmp_path: Path) -> None:
    cases = yaml.safe_load((FIXTURES / "lanes.yaml").read_text())
    case = cases["cases"][0]
    case["expected"]["preempted"] = [{"name": "sweep-1", "reason": "InCohortReclamation"}]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"cases": [case]}))
    res = CliRunner().invoke(admit, ["--cases", str(bad)])
    assert res.exit_code == 1
    assert "FAIL lanes-01-release-eval-reclaims-from-research: preempted" in res.stderr


def test_cli_admit_works_inside_another_group() -> None:
    import click

    @click.group()
    def main() -> None:
        pass

    main.add_command(admit)
    res = CliRunner().invoke(main, ["admit", "--cases", str(FIXTURES / "kueue.yaml"), "--summary"])
    assert res.exit_code == 0, res.output
    assert "5 case(s) passed" in res.stderr


@pytest.mark.parametrize(
    "case_id",
    [
        "gang-02-fragmented-free-gpus-do-not-admit-a-gang",
        "gang-03-one-node-job-needs-one-node-with-enough-free",
        "gang-07-victims-on-one-node-free-it-for-an-8-gpu-job",
        "gang-08-minimal-victims-still-free-a-node",
    ],
)
def test_gang_cases_need_the_node_model(case_id: str) -> None:
    """Without its `nodes` (quota only, Kueue's view) the same case fails: the node model decides it."""
    case = next(c for c in load_cases(FIXTURES / "gang.yaml") if c["id"] == case_id)
    assert run_case(case).ok
    quota_only = {k: v for k, v in case.items() if k != "nodes"}
    assert not run_case(quota_only).ok
