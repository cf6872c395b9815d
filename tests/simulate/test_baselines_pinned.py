"""Every FIFO baseline's per-job outcome on the ElasticFlow slice (fleet mix, 256 GPUs), quota-only
and on the policy's nodes, pinned: the baselines are one event loop parameterized by the pool
(`baselines._replay`); the digests were taken from the three loops it replaced, so the loop must
leave every start, end, flavor, placement, refusal, usage event and stranded GPU-second as they
gave it. Re-pin only with a deliberate change of behaviour. Re-pinned once: `--capacity` keeps
the serving lane's 8 L4s as declared and scales the rest (flavor capacities changed, so the
flavor and node baselines did; the one-pool quota-only ones did not)."""

from __future__ import annotations

import hashlib

import pytest

from gpu_platform.policy import load_policy
from gpu_platform.simulate import simulate
from gpu_platform.simulate.scenarios import (
    SCENARIOS,
    fifo_flavors_fast_scenario,
    policy_node_gpus,
    with_nodes,
)
from tests.simulate.test_outcome_pinned import _tiled

SCENARIO = {**SCENARIOS, "fifo-flavors-fast": fifo_flavors_fast_scenario}


@pytest.mark.parametrize(
    ("name", "nodes", "digest"),
    [
        ("fifo", False, "2986ee12bf98eb5f17a5d6d962c214ba5232758cb9e6737622916c00ae26c32e"),
        ("fifo", True, "924018b28cf5c877c27b01eab647c678a419974543ced6dece0012915c6ba35b"),
        ("fifo-backfill", False, "02489bf9fc3346777b7315bab93fb98a88b58f99c680a0988f9f190ff7c8ddad"),
        ("fifo-backfill", True, "9dc6eacd1781ffcaccb77231f9a490af554bea2450a87b49a221649b64dc3ae5"),
        ("fifo-flavors-fast", False, "615c845faf2a702961a08cc9f870f5d9e2c1702233f01ebc0bd9960cf06d58be"),
        ("fifo-flavors-fast", True, "725637ce634ac6498adfa303c551aeac6f683c2ce74c53d82bba42f4024c362a"),
        ("fifo-flavors-backfill", False, "02cf901df21f9c4e358900917f111d1901800a2fda1136e1f1aaf0b37e5844e4"),
        ("fifo-flavors-backfill", True, "713728d2fd700d173515ef3f57926c632fb35f4b49f4df329e9d9d48ec53f2cf"),
    ],
)
def test_baseline_outcome_is_pinned(name, nodes, digest):
    pol = load_policy()
    scn = SCENARIO[name](pol, 256)
    if nodes:
        scn = with_nodes(scn, policy_node_gpus(pol))
    res = simulate(scn, _tiled("elasticflow-fleet", 1))
    h = hashlib.sha256()
    for r in res.runs:
        h.update(
            repr(
                (r.job.job_id, r.state, r.reason, r.flavor, r.first_admit, r.last_admit, r.end, r.used_gpu_s,
                 r.wait_reason, r.placement)
            ).encode()
        )
    h.update(repr((res.start, res.end, res.stranded_gpu_s, res.usage_events)).encode())
    assert h.hexdigest() == digest
    assert (res.stranded_gpu_s is None) == (not nodes)
