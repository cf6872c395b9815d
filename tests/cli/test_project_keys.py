"""The project config's keys, checked without pydantic (read by every command, `--help` too):
each problem named with its key, in the words the pydantic model used."""

from __future__ import annotations

import pytest

from gpu_platform.cli.project import VARIABLES, ConfigError, ProjectConfig, parse_config


def test_every_key_is_optional_and_null_is_unset():
    assert parse_config({}, "f") == ProjectConfig()
    assert parse_config({"home": ".demo", "ledger": None}, "f") == ProjectConfig(home=".demo")
    assert set(VARIABLES) == set(ProjectConfig.__dataclass_fields__)


def test_every_problem_is_named_with_its_key():
    raw = {"warehose": "w", "home": "", "ledger": 5, "policy": "p" * 4097, 7: "x", "warehouse": "ok"}
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, "gpu-platform.yaml")
    known = ", ".join(VARIABLES)
    assert exc.value.source == "gpu-platform.yaml"
    assert exc.value.errors == [
        f"warehose: unknown key (one of: {known})",
        f"7: unknown key (one of: {known})",
        "home: String should have at least 1 character",
        "ledger: Input should be a valid string",
        "policy: String should have at most 4096 characters",
    ]
