"""Every model computes the same rows as the snapshot in tests/fixtures/sqlmodels_golden/ (made from
the SQL before the models shared their blocks through macros): on the hand-computed scenario, the
feed fixtures, the whole AWS-shaped bill and three days of the demo's history. A change meant to
change rows regenerates the snapshot on purpose (tests/sqlmodels/golden.py says how)."""

from __future__ import annotations

import json

import pytest

from gpu_platform.finops.sqlmodels import Project, default_project_path
from tests.sqlmodels.golden import DATASETS, GOLDEN, snapshot


@pytest.mark.parametrize("dataset", DATASETS, ids=[d.name for d in DATASETS])
def test_models_give_the_golden_rows(dataset, tmp_path):
    golden = json.loads((GOLDEN / f"{dataset.name}.json").read_text())
    now = snapshot(Project.load(default_project_path()), dataset, tmp_path)
    problems = []
    for name in sorted(set(golden["models"]) | set(now["models"])):
        was, is_ = golden["models"].get(name), now["models"].get(name)
        if was is None or is_ is None:
            problems.append(f"{name}: {'new model' if was is None else 'model gone'}")
        elif was["columns"] != is_["columns"]:
            problems.append(f"{name}: columns {was['columns']} -> {is_['columns']}")
        elif (was["rows"], was["digest"]) != (is_["rows"], is_["digest"]):
            problems.append(f"{name}: {was['rows']} rows ({was['digest'][:8]}) -> {is_['rows']} rows "
                            f"({is_['digest'][:8]})")
    for test in sorted(set(golden["tests"]) | set(now["tests"])):
        if golden["tests"].get(test) != now["tests"].get(test):
            problems.append(f"data test {test}: failures {golden['tests'].get(test)} -> {now['tests'].get(test)}")
    assert not problems, f"{dataset.name}: rows differ from {GOLDEN.name}/{dataset.name}.json:\n" + "\n".join(problems)
    # the snapshot is not empty: every model that holds rows here held them in the snapshot
    assert sum(m["rows"] for m in golden["models"].values()) > 0
