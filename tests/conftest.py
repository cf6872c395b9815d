"""Shared fixtures: the policy, a real SQLite ledger, and a real PostgreSQL database per test.

`make test` starts a throwaway PostgreSQL 15 (scripts/with-postgres.sh) and exports
GPU_PLATFORM_TEST_PG_URL. Outside `make test` the Postgres tests skip with that instruction;
under `make test` the variable is always set, so they never skip there.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpu_platform.policy import Policy, load_policy

# a project config (./gpu-platform.yaml that `make demo` writes, ~/.config/gpu-platform) must not
# point the tests' CLI at a demo's state; the tests of the lookup set the variable themselves
os.environ.setdefault("GPU_PLATFORM_CONFIG", "none")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples" / "requests"


@pytest.fixture(autouse=True)
def _stop_signals_default() -> Iterator[None]:
    """Each test starts with SIGINT and SIGTERM handled as a fresh Python process handles them
    (and leaves them so). Under the full suite some test that runs Dagster in process (whose
    interrupt handling swaps SIGINT's handler and maps SIGTERM to it) left both ignored in its
    worker, and every process a later test started inherited that: a `metrics serve` or a demo
    child that SIGTERM no longer stopped."""

    def reset() -> None:
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_IGN, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    reset()
    yield
    reset()


@pytest.fixture(scope="session")
def policy() -> Policy:
    return load_policy()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    url = os.environ.get("GPU_PLATFORM_TEST_PG_URL")
    if not url:
        pytest.skip("needs PostgreSQL 15: run `make test`, which starts one and sets GPU_PLATFORM_TEST_PG_URL")
    return url


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the test server; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'create database "{name}"'))
    url = pg_server_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        sa.create_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'drop database if exists "{name}" with (force)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("pg_url")
