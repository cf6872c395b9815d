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


SUBMITTER = "platform-lead@example.com"
"""Who `gpu-platform submit` runs as in tests (a roster role with submit_for_others in the default
policy, so the examples' owners need not be the caller): the CI has no identity source, and the
default policy's scale S4 refuses an unverified submitter. tests/test_identity_submit.py tests
the real resolution (marker `real_identity`)."""


@pytest.fixture(autouse=True)
def _verified_submitter(request, monkeypatch) -> None:
    """A test double of the identity source (CI has none): `submit`'s caller is a verified roster
    member (`SUBMITTER`) and `approve`'s is the `--approver` it names, unless the test is marked
    `real_identity` (then `identity.current_identity` decides, as in production)."""
    if request.node.get_closest_marker("real_identity"):
        return
    from gpu_platform.requests.identity import Identity

    monkeypatch.setattr("gpu_platform.cli.requests.caller_identity",
                        lambda: Identity(SUBMITTER, "kubernetes", configured=True))
    monkeypatch.setattr("assets.submit.launchpad_identity",
                        lambda context: Identity(SUBMITTER, "dagster", configured=True))
    # `approve`: the identity source vouches for the `--approver` named (else $USER)
    monkeypatch.setattr(
        "gpu_platform.cli.approve.caller_identity",
        lambda claimed=None: Identity(claimed or os.environ.get("USER") or "root", "kubernetes", configured=True),
    )


@pytest.fixture(autouse=True)
def _nominee_approves(request, monkeypatch) -> None:
    """A test double of the nominated approver running `gpu-platform approve`: a request recorded
    in a lane with `requires_approval` whose `approver` is a member of a roster role that may
    grant it gets that member's verified grant at once, so the many tests of what the gate does
    with incident work need not each play the approver. Tests marked `real_identity`
    (tests/test_incident_approval.py, tests/test_identity_submit.py) see the real rule: a
    nomination grants nothing until the nominee approves (docs/approvals.md)."""
    if request.node.get_closest_marker("real_identity"):
        return
    from gpu_platform.requests.ledger import Ledger

    original = Ledger.submissions

    def submissions(self, requests, *args, **kwargs):
        done = original(self, requests, *args, **kwargs)
        pol = kwargs.get("policy") or load_policy()
        at = kwargs.get("at", args[1] if len(args) > 1 else None)  # granted when it was submitted
        for req, sub in zip(requests, done, strict=True):
            lane = pol.lanes.get(req.lane or "")
            kind = lane.requires_approval if lane is not None else None
            if sub.outcome != "recorded" or kind is None or not req.approver or req.approver == req.owner:
                continue
            roles = [r for r, spec in pol.approvers.items() if kind in spec.may_approve and req.approver in spec.members]
            if roles:
                details = {"kind": kind, "role": roles[0], "approver": req.approver, "reason": "test: the nominee approved",
                           "identity_source": "test", "verified": True}
                self.record(sub.request_id, "approved", f"{kind} approval by {req.approver}", details=details, at=at)
        return done

    monkeypatch.setattr(Ledger, "submissions", submissions)


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


@pytest.fixture(autouse=True)
def _no_inherited_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist's workers run with COLUMNS=80 in their environment; the CLI honours $COLUMNS
    (as a terminal user sets it), so a test would see 80-column tables under `make test` (-n 2)
    and wider ones alone. Every test starts as a pipe does (no $COLUMNS: 200 columns); a test of
    a width sets it itself (tests/cli/test_tables.py)."""
    monkeypatch.delenv("COLUMNS", raising=False)
