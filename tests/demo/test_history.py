"""The demo's generated history: pushed through the admission engine, consistent across feeds."""

from __future__ import annotations

import json
from datetime import date, timedelta

import numpy as np
import pytest

from gpu_platform.demo import history as demo_history
from gpu_platform.finops.feeds.k8s_inventory import parse_nodes, parse_pods, provider_key
from gpu_platform.policy import load_policy

DAYS = [date(2026, 11, 1) + timedelta(days=n) for n in range(8)]


@pytest.fixture(scope="module")
def policy():
    return load_policy(None)


@pytest.fixture(scope="module")
def history(policy):
    return demo_history.generate(policy, DAYS)


def test_every_lane_runs_and_the_story_has_its_ingredients(history):
    s = demo_history.summary(history)
    assert set(s["lanes"]) == {"incident_response", "release_eval", "map_semantic_batch", "candidate_train",
                               "platform_maintenance", "labeler_batch", "baseline_rebuild", "research_best_effort"}
    total = lambda key: sum(x[key] for x in s["lanes"].values())  # noqa: E731
    assert total("preempted") > 0 and total("oom_retries") > 0 and total("failed") > 0
    # the sweep floods research: many trials wait, and the oversized release replay waits long
    sweep = [j for j in history.jobs if "-sweep-" in j.request_id]
    assert len(sweep) == demo_history.SWEEP_JOBS and max(j.waited_s for j in sweep) > 3600
    (full,) = [j for j in history.jobs if "-full-odd-" in j.request_id]
    assert full.waited_s > 3600
    # preempted research resumes: a later attempt of the same request runs after the preemption
    preempted = [j for j in history.jobs if any(x.outcome == "preempted" for x in j.segments)]
    assert all(len(j.segments) >= 2 for j in preempted)


def test_no_gpu_is_held_twice_and_no_flavor_over_capacity(history, policy):
    held: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for job in history.jobs:
        for seg in job.segments:
            assert sum(len(g) for _, g in seg.placement) == job.request.gpu_count
            nodes = {n.name: n.flavor for n in history.nodes}
            for node, gpus in seg.placement:
                assert nodes[node] == seg.flavor
                for g in gpus:
                    held.setdefault((node, g), []).append((seg.start, seg.end))
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end


def test_feeds_agree_with_each_other(history, policy, tmp_path):
    day = DAYS[3]
    nodes = parse_nodes(demo_history.nodes_doc(history, day), source="nodes.json")
    pods = parse_pods(demo_history.pods_doc(history, day, policy), source="pods.json")
    assert nodes.quarantine.height == 0 and pods.quarantine.height == 0
    assert nodes.accepted == len(history.nodes) and pods.accepted > 0
    keys = set(nodes.rows["provider_key"].to_list())
    rows = demo_history.focus_rows(history)
    instance_rows = [r for r in rows if r.get("ResourceType") == "Instance"]
    assert {provider_key(r["ResourceId"])[1] for r in instance_rows} == keys  # bills match nodes by cloud id
    assert set(nodes.rows["gpu_capacity"].to_list()) == {8}
    # nodes carry their flavor's node pool (training / inference / spot), as on a real cluster,
    # so node-pool scorecards and signals never take a flavor for a pool
    pool_of = {f.name: f.node_pool for f in policy.flavors}
    by_name = {n.name: n for n in history.nodes}
    assert set(nodes.rows["node_pool"].to_list()) <= set(pool_of.values())
    for name, pool in zip(nodes.rows["node"].to_list(), nodes.rows["node_pool"].to_list(), strict=True):
        assert pool == pool_of[by_name[name].flavor]
    frame = demo_history.dcgm_frame(history, history.nodes[0], day, policy, np.random.default_rng(0))
    labelled = set(frame["pod"].drop_nulls().unique().to_list())
    on_node = set(pods.rows.filter(pods.rows["node"] == history.nodes[0].name)["pod"].to_list())
    assert labelled and labelled <= on_node  # every sample's pod is a pod of that node
    busy = frame.filter(frame["metric"] != demo_history.FB_USED)
    memory = frame.filter(frame["metric"] == demo_history.FB_USED)
    assert busy.height == 86400 // 15 * 8  # one busy sample per GPU every 15 s
    assert memory.height == 86400 // (15 * demo_history.MEMORY_EVERY) * 8  # framebuffer use every 60 s
    held = memory.filter(memory["pod"].is_not_null())
    assert held.height and held["value"].min() > 0  # a GPU a pod holds uses memory
    assert memory.filter(memory["pod"].is_null())["value"].max() == 0
    assert memory["value"].max() <= 0.95 * 80 * 1024 + 1  # never over the GPU's framebuffer
    assert json.dumps(demo_history.summary(history))
