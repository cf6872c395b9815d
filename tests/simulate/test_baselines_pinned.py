"""Every FIFO baseline's per-job outcome on the ElasticFlow slice (fleet mix, 256 GPUs), quota-only
and on the policy's nodes, pinned: the baselines are one event loop parameterized by the pool
(`baselines._replay`); the digests were taken from the three loops it replaced, so the loop must
leave every start, end, flavor, placement, refusal, usage event and stranded GPU-second as they
gave it. Re-pin only with a deliberate change of behaviour. Re-pinned once: `--capacity` keeps
the serving lane's 8 L4s as declared and scales the rest (flavor capacities changed, so the
flavor and node baselines did; the one-pool quota-only ones did not). Re-pinned twice: a gang's
pods may share a node when its free GPUs hold more than one (kube-scheduler's rule,
`admission/nodes.py`), so the node runs changed where a trace gang is split by the 4-GPU L4 node
size and its 4-GPU pods now go two to a free 8-GPU node; the quota-only ones did not."""

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
        ("fifo", True, "56113e5ea78a6fe4e72858db7522196c5e3c557a6a7182005bf37685d4446b84"),
        ("fifo-backfill", False, "02489bf9fc3346777b7315bab93fb98a88b58f99c680a0988f9f190ff7c8ddad"),
        ("fifo-backfill", True, "2ac92c157431c4ec4a97c166ca9b4b54ee78034b6fea7df8f81dcd937d77e3f0"),
        ("fifo-flavors-fast", False, "615c845faf2a702961a08cc9f870f5d9e2c1702233f01ebc0bd9960cf06d58be"),
        ("fifo-flavors-fast", True, "9b3288163476774f97be7f34d502df3bd14bcbd590a204fd13b3c10919677ebd"),
        ("fifo-flavors-backfill", False, "02cf901df21f9c4e358900917f111d1901800a2fda1136e1f1aaf0b37e5844e4"),
        ("fifo-flavors-backfill", True, "670ab17dd6edf8ad3b05f7ff2c47270caf71e76df00dd03fba386f377052f58e"),
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
