"""Fixtures of the observability tests: the gate's real ledger + Dagster instance (`env`), and a
preemption scenario played through the admission sensor."""

from __future__ import annotations

import pytest

from gpu_platform.gate.checkpoints import checkpoint_dir
from gpu_platform.gate.tick import TAG_REQUEST_ID
from tests.gate.helpers import add_run, env, fill_h100, submit, tick  # noqa: F401


@pytest.fixture
def preempted(env, policy):  # noqa: F811
    """H100s filled (research borrowing, checkpointed), then an incident that reclaims one research job.

    Returns (instance, ledger, resources, home, incident id, victim id, run ids by request).
    """
    instance, ledger, resources, home = env
    research, _others = fill_h100(ledger, policy)
    first = tick(instance, resources)
    launched = [r.tags[TAG_REQUEST_ID] for r in first.run_requests]
    run_ids = {rid: add_run(instance, rid, 1, lane=ledger.get(rid).lane) for rid in launched}
    for rid in launched:
        ckpt = checkpoint_dir(home, rid)
        ckpt.mkdir(parents=True)
        (ckpt / "ckpt-00000001.npz").write_bytes(b"x")
    incident = submit(ledger, policy, "incident_response", gpu_count=8)
    tick(instance, resources)
    victim = next(rid for rid in research if ledger.state(rid).state == "requeued")
    return instance, ledger, resources, home, incident, victim, run_ids
