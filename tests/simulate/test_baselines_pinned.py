"""Every FIFO baseline's per-job outcome on the ElasticFlow slice (fleet mix, 256 GPUs), quota-only
and on the policy's nodes, pinned: the baselines are one event loop parameterized by the pool
(`baselines._replay`); the digests were taken from the three loops it replaced, so the loop must
leave every start, end, flavor, placement, refusal, usage event and stranded GPU-second as they
gave it. Re-pin only with a deliberate change of behaviour."""

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
        ("fifo", True, "9e26aa49701a7ed0874fee2dda00c8e2fb2a8ceecce869d679ad9828727c3066"),
        ("fifo-backfill", False, "02489bf9fc3346777b7315bab93fb98a88b58f99c680a0988f9f190ff7c8ddad"),
        ("fifo-backfill", True, "ce359dd41f84915f5ce1f7d994e0970e4457dcb4f5fbdce89c4a6d9217bcdc20"),
        ("fifo-flavors-fast", False, "f8cefe3932875775703df8f25ef84b3c0fdaa95ab306c168ab8e28362e409c81"),
        ("fifo-flavors-fast", True, "07aaf7668aa6cbbf6584d065f4e509eaf7ba69bceb26eab7b384cc17aa49c957"),
        ("fifo-flavors-backfill", False, "b83e5ce9d68469d98d96c7f95372d049d0fc650e14498a2a1b9acda2665902a5"),
        ("fifo-flavors-backfill", True, "d4f3f15ed11e8a884af5d18c301374c7abf37ecbbbe06c9627d4154c045cc3f5"),
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
