"""The project config: where the CLI finds its state when the environment does not say.

A YAML file names the home, ledger, warehouse (and optionally the policy, the evidence root and
the Dagster home) so `gpu-platform queue` run in a project directory reads that project's state
without exporting variables. Looked for, first found wins:

1. `$GPU_PLATFORM_CONFIG` (a file; `none` turns the lookup off);
2. `./gpu-platform.yaml` in the working directory (`make demo` writes one naming `.demo`);
3. `$XDG_CONFIG_HOME/gpu-platform/config.yaml` (`~/.config/...` when XDG_CONFIG_HOME is unset).

Precedence, highest first: a command's option (`--ledger`, `--warehouse`, `--policy`), the
environment variable, the project config, the built-in default (`./var`). The config fills in
only variables the environment leaves unset, for the duration of one command (and the processes
it starts). Relative paths in the file are relative to the file's directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

CONFIG_NAME = "gpu-platform.yaml"
CONFIG_ENV = "GPU_PLATFORM_CONFIG"
CONFIG_LIMITS = {"max_bytes": 64 * 1024, "max_depth": 4, "max_nodes": 1_000}
"""The file's `gpu_platform.safeload.Limits`."""
MAX_VALUE = 4096
"""The longest value (characters) of a key."""
DEMO_MARK = "# written by `gpu-platform demo seed --project-config`"
"""The first line of a config the demo wrote: the demo rewrites only files that start with it."""

VARIABLES = {
    "home": "GPU_PLATFORM_HOME",
    "ledger": "GPU_PLATFORM_LEDGER_URL",
    "warehouse": "GPU_PLATFORM_WAREHOUSE",
    "policy": "GPU_PLATFORM_POLICY",
    "evidence_root": "GPU_PLATFORM_EVIDENCE_ROOT",
    "dagster_home": "DAGSTER_HOME",
    "identity": "GPU_PLATFORM_IDENTITY",
}
"""Config key -> the environment variable it stands in for."""

APPLIED: dict[str, str] = {}
"""The variables the project config set for this command (`apply_config` on the process's
environment): `approve` and `submit` take a policy from the config only where the ledger comes
from the same config (`deployed_policy_path`)."""


class ConfigError(ValueError):
    """A project config that cannot be used; `errors` names each problem with its key."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: " + "; ".join(errors))


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where a command's state comes from. config: the file used (None: none found);
    applied: variables the file set; shadowed: variables the file names but the environment
    already set (the environment wins)."""

    config: Path | None
    applied: dict[str, str] = field(default_factory=dict)
    shadowed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """The file's keys; each optional, a string of 1 to 4096 characters. ledger: a SQLAlchemy
    URL, or a path to a SQLite file. Checked by `parse_config`, without pydantic: every command
    reads the config, `--help` included (issue 40)."""

    home: str | None = None
    ledger: str | None = None
    warehouse: str | None = None
    policy: str | None = None
    evidence_root: str | None = None
    dagster_home: str | None = None
    identity: str | None = None


def parse_config(raw: Mapping, source: str) -> ProjectConfig:
    """`raw` (the file's mapping) as a ProjectConfig; ConfigError names every problem with its key."""
    errors = [f"{key}: unknown key (one of: {', '.join(VARIABLES)})" for key in raw if key not in VARIABLES]
    for key in VARIABLES:
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            errors.append(f"{key}: Input should be a valid string")
        elif not value:
            errors.append(f"{key}: String should have at least 1 character")
        elif len(value) > MAX_VALUE:
            errors.append(f"{key}: String should have at most {MAX_VALUE} characters")
    if errors:
        raise ConfigError(source, errors)
    return ProjectConfig(**{key: raw.get(key) for key in VARIABLES})


def find_config(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The project config to use, or None (see the module docstring for the order)."""
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return None if explicit.lower() == "none" else Path(explicit)
    local = (cwd or Path.cwd()) / CONFIG_NAME
    if local.is_file():
        return local
    xdg = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpu-platform" / "config.yaml"
    return xdg if xdg.is_file() else None


def load_config(path: Path) -> dict[str, str]:
    """The file's settings as environment variables (paths made absolute); ConfigError names
    every problem (unknown keys, wrong types) with its key."""
    from gpu_platform.safeload import InputError, Limits, load_document

    try:
        raw = load_document(path, Limits(**CONFIG_LIMITS))
    except InputError as exc:
        raise ConfigError(exc.source, exc.errors) from None
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(str(path), [f"<root>: expected a mapping of {', '.join(VARIABLES)}"])
    cfg = parse_config(raw, str(path))
    base = path.resolve().parent
    out: dict[str, str] = {}
    for key, var in VARIABLES.items():
        value = getattr(cfg, key)
        if value is None:
            continue
        if key == "identity":  # a source's name (GPU_PLATFORM_IDENTITY), not a path
            out[var] = value
        elif key == "ledger" and "://" in value:
            out[var] = value
        elif key == "ledger":
            out[var] = f"sqlite:///{(base / Path(value).expanduser()).resolve()}"
        else:
            out[var] = str((base / Path(value).expanduser()).resolve())
    return out


def apply_config(env: MutableMapping[str, str] | None = None, cwd: Path | None = None) -> Resolution:
    """Fill the variables `env` leaves unset from the project config; say what came from where."""
    env = os.environ if env is None else env
    if env is os.environ:
        APPLIED.clear()
    path = find_config(env, cwd)
    if path is None:
        return Resolution(None)
    if not path.is_file():
        raise ConfigError(str(path), [f"{CONFIG_ENV} names a file that does not exist"])
    settings = load_config(path)
    applied, shadowed = {}, {}
    for var, value in settings.items():
        if env.get(var):
            shadowed[var] = value
        else:
            env[var] = value
            applied[var] = value
    if env is os.environ:
        APPLIED.update(applied)
    return Resolution(path, applied, shadowed)


def deployed_policy_path(ledger_url: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The policy whose roster and team members decide for the ledger this command writes (None:
    the packaged default): never a `--policy` option. `$GPU_PLATFORM_POLICY` from the caller's
    environment; one a project config set only where that config also names the ledger (its
    `ledger`, or its `home` with no ledger set otherwise): a config is a whole project, and a
    planted one cannot lend its roster to a ledger it does not own."""
    env = os.environ if env is None else env
    value = env.get("GPU_PLATFORM_POLICY") or None
    if value is None or "GPU_PLATFORM_POLICY" not in APPLIED:
        return value
    ledger_from_config = ledger_url is None and (
        "GPU_PLATFORM_LEDGER_URL" in APPLIED
        or (not env.get("GPU_PLATFORM_LEDGER_URL") and "GPU_PLATFORM_HOME" in APPLIED)
    )
    return value if ledger_from_config else None


def demo_config_text(home: Path, dagster_home: Path | None, relative_to: Path, policy: Path | None = None) -> str:
    """The project config `make demo` writes: the demo's home (and Dagster home), relative to the
    file's directory when under it; with `policy`, the demo's own policy and the OS login as its
    identity source (gpu_platform/demo/identity.py)."""

    def rel(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(relative_to.resolve()))
        except ValueError:
            return str(p.resolve())

    lines = [
        DEMO_MARK,
        "# so the CLI run from this directory reads the demo's state (README, Configuration);",
        "# environment variables still win. `rm -rf .demo gpu-platform.yaml` starts over.",
        f"home: {rel(home)}",
    ]
    if dagster_home is not None:
        lines.append(f"dagster_home: {rel(dagster_home)}")
    if policy is not None:
        lines += [f"policy: {rel(policy)}", "identity: os_user"]
    return "\n".join(lines) + "\n"
