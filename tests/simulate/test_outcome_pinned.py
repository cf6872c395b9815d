"""The simulator's per-job outcome on the tiled ElasticFlow slice, pinned: the engine's and the
event loop's fast paths (no estimated starts in simulator calls, reused snapshot nodes, memoized
static quota answers, bulk usage) must leave every job's outcome exactly as the plain code gave
it. The digests were taken before those paths existed; re-pin them only with a deliberate change
of behaviour."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_platform.cli.simulate import LANE_MAPS
from gpu_platform.policy import load_policy
from gpu_platform.simulate import SCENARIOS, load_lane_map, load_trace, simulate

SLICE = Path(__file__).resolve().parents[1] / "fixtures" / "simulate" / "elasticflow-cluster04-head2000.csv"


def _tiled(lane_map: str, copies: int):
    base = load_trace(SLICE, lane_map=load_lane_map(LANE_MAPS / f"{lane_map}.yaml")).jobs
    t0 = min(j.submit_ts for j in base)
    span = max(j.submit_ts for j in base) - t0 + 3600
    return [replace(j, job_id=f"{j.job_id}~{k}", submit_ts=j.submit_ts - t0 + k * span) for k in range(copies) for j in base]


@pytest.mark.parametrize(
    ("lane_map", "calls", "cycles", "preemptions", "digest"),
    [
        # the work-conserving default (the assurance reserve and the training/release lending
        # limits lend while idle and are reclaimed by preemption; BestEffortFIFO release and
        # incident lanes) changed both mixes' outcomes: borrowed reserve GPUs are taken back
        # the serving lane lends its idle L4s (no lending_limit): batch runs there and fewer
        # borrowed reserve GPUs are taken back
        # `--capacity` keeps the serving lane's 8 L4s as declared and scales the rest: fewer L4s
        # and more H100/A100s for the batch lanes at 768 GPUs
        # head reservations on in the packaged policy (candidate_train, release_eval,
        # incident_response: `targets.reserve_head`): a blocked head's GPUs are kept from
        # lower-priority work that would run past its expected start, and held work takes no head
        # turn in the engine (fewer calls and cycles)
        # a head that free GPUs hold now keeps them reserved (Kueue's cycle takes work within its
        # nominal quota first; dropped, the reservation handed them to lower lanes), and the
        # serving lane's idle L4s an evidence head may not borrow never count as free for it
        # the serving lane lends its idle L4s to candidate runs too (`lend_to_evidence`, a 30m bound
        # on the wait for their checkpoint): candidate runs borrow L4s they were kept off, and
        # lanes with quota there take some back (4 preemptions, none before)
        ("elasticflow", 3633, 10098, 4, "71f917e883a846735390bd796c97062e77e3840d1ee2512cc5a17ae23c13c304"),
        # aging (targets.boost_after): candidate runs waiting past 24 h take GPUs back from the
        # lane's younger runs; every queue is shown again at an aging step, so the simulator's
        # shortcuts give the full queue's outcome
        # head reservations on (as above); a head that fits now keeps its GPUs (as above)
        # candidate runs borrow the serving lane's idle L4s (as above)
        ("elasticflow-fleet", 3584, 9469, 50, "50fc2bd69f265b53761c37788511f6ca9874fcdca3e38f527cc494a6514c0102"),
    ],
)
def test_per_job_outcome_is_pinned(lane_map, calls, cycles, preemptions, digest):
    res = simulate(SCENARIOS["policy"](load_policy(), 768), _tiled(lane_map, 2))
    h = hashlib.sha256()
    for r in res.runs:
        h.update(
            repr(
                (r.job.job_id, r.state, r.reason, r.flavor, r.first_admit, r.last_admit, r.end, r.queued_s,
                 r.preemptions, r.lost_gpu_s, r.used_gpu_s, r.wait_reason)
            ).encode()
        )
    assert (res.engine_calls, res.cycles, sum(r.preemptions for r in res.runs)) == (calls, cycles, preemptions)
    assert h.hexdigest() == digest


def test_engine_state_is_the_keyword_built_one():
    """The state each engine call gets (built through ClusterState's slots) equals the one built
    by keyword from the scenario's state."""
    from gpu_platform.admission import ClusterState
    from gpu_platform.simulate.des import _Sim

    scn = SCENARIOS["policy"](load_policy(), 768)
    jobs = _tiled("elasticflow", 1)[:50]
    sim = _Sim(scn, jobs, 0.0, 1800.0, 16, 1, True, True)
    wls = tuple(r.wl for r in sim.runs[:3])
    got = sim._state(wls[:1], wls[1:], 42.0)
    assert type(got) is ClusterState
    assert got == ClusterState(**{**sim.base_kw, "admitted": wls[:1], "pending": wls[1:], "now": 42.0})
