"""The warehouse resource reads the policy's model variables once per version of the file."""

from __future__ import annotations

import os
from pathlib import Path

from gpu_platform.policy import default_policy_path
from resources.warehouse import Warehouse


def test_policy_variables_follow_the_file_and_are_not_shared(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    text = default_policy_path().read_text()
    assert "  pool_utilization_min: 0.30" in text
    policy.write_text(text)
    wh = Warehouse(path=str(tmp_path / "wh.duckdb"), policy_path=str(policy))
    first = wh.variables()
    assert first["cs_pool_utilization_min"] == 0.30
    first["scorecard_rows"].clear()  # a caller changing its copy changes nobody else's
    assert wh.variables()["scorecard_rows"]
    policy.write_text(text.replace("  pool_utilization_min: 0.30", "  pool_utilization_min: 0.45"))
    os.utime(policy, ns=(os.stat(policy).st_atime_ns, os.stat(policy).st_mtime_ns + 1_000_000))
    assert wh.variables()["cs_pool_utilization_min"] == 0.45
    assert Warehouse(path=str(tmp_path / "wh.duckdb")).variables()["cs_pool_utilization_min"] == 0.30
