from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.cli import main
from gpu_platform.policy import GPU, PolicyError, load_policy, parse_policy

LANES = {
    "research_best_effort",
    "baseline_rebuild",
    "candidate_train",
    "release_eval",
    "map_semantic_batch",
    "labeler_batch",
    "incident_response",
    "platform_maintenance",
    "online_serving",
}
BROKEN = Path(__file__).parent / "fixtures" / "policies" / "broken.yaml"


def test_default_policy_has_the_nine_lanes_in_priority_order(policy):
    assert set(policy.lanes) == LANES and len(policy.lanes) == 9
    order = [lane.name for lane in policy.lanes_by_priority()]
    assert order[0] == "incident_response"
    assert order[-1] == "research_best_effort"
    assert policy.lane("platform_maintenance").protected
    assert policy.lane("release_eval").yields_to == ("incident_response",)


def test_default_policy_nominal_quotas_fit_capacity(policy):
    for flavor in policy.flavors:
        total = sum(q.nominal_quota for lane in policy.lanes.values() for q in lane.quotas if q.flavor_name == flavor.name and q.resource == GPU)
        assert total <= flavor.capacity[GPU], flavor.name


def test_broken_policy_reports_every_error_with_its_path():
    with pytest.raises(PolicyError) as exc:
        load_policy(BROKEN)
    errors = exc.value.errors
    expected = [
        "flavors: duplicate flavor name 'h100-ondemand'",
        "flavors[1].node_pool:",
        "lanes.release_eval.quotas[0].borrowing_limit: set but lane has no cohort_name",
        "lanes.release_eval.quotas[1].flavor_name: unknown flavor 'b200-ondemand'",
        "lanes.release_eval.quotas[1].nominal_quota: Input should be greater than or equal to 0",
        "lanes.release_eval.yields_to[0]: unknown lane 'incident_respons'",
        "lanes.research_best_effort.max_run_duration: not a duration: 'soon'",
        "lanes: priority 800 is shared by release_eval, research_best_effort",
        "more than the capacity 8",
    ]
    for fragment in expected:
        assert any(fragment in e for e in errors), (fragment, errors)


def _mutate(policy_dict, fn):
    data = yaml.safe_load(yaml.safe_dump(policy_dict))
    fn(data)
    return data


@pytest.fixture
def raw_default():
    return yaml.safe_load(Path(load_policy.__globals__["default_policy_path"]()).read_text())


@pytest.mark.parametrize(
    "mutation, fragment",
    [
        (lambda d: d["lanes"]["release_eval"]["quotas"][0].update(lending_limit=99), "lanes.release_eval.quotas[0].lending_limit: 99 exceeds nominal_quota 4"),
        (lambda d: d["lanes"]["release_eval"].update(cohort_name="nope"), "lanes.release_eval.cohort_name: unknown cohort 'nope'"),
        (lambda d: d["lanes"]["release_eval"]["quotas"].append(dict(d["lanes"]["release_eval"]["quotas"][0])), "duplicate quota for (h100-ondemand, nvidia.com/gpu)"),
        (lambda d: d["lanes"]["platform_maintenance"].update(yields_to=["incident_response"]), "a protected lane is never preempted"),
        (lambda d: d["lanes"]["release_eval"].update(priorty=3), "lanes.release_eval.priorty: Extra inputs are not permitted"),
        (lambda d: d["teams"]["safety"].update(namespace="team-perception"), "namespace 'team-perception' used by 2 teams"),
        (lambda d: d["flavors"][0]["capacity"].pop("nvidia.com/gpu"), "flavors[0].capacity: must declare nvidia.com/gpu"),
        (lambda d: d["lanes"]["research_best_effort"]["team_limits"].update(teams={"nobody": {"max_gpus": 2}}), "lanes.research_best_effort.team_limits.teams.nobody: unknown team 'nobody'"),
        (lambda d: d["lanes"]["research_best_effort"]["team_limits"].update(default={}), "lanes.research_best_effort.team_limits.default: set at least one of max_gpus, max_share, max_running"),
        (lambda d: d["lanes"]["research_best_effort"]["team_limits"]["default"].update(max_share=1.5), "lanes.research_best_effort.team_limits.default.max_share: Input should be less than or equal to 1"),
        (lambda d: d["approvers"]["finops"].update(may_approve=["refunds"]), "approvers.finops.may_approve[0]: Input should be 'safety', 'cost' or 'incident'"),
        (lambda d: d["approvers"]["finops"].update(members=[]), "approvers.finops.members: Tuple should have at least 1 item"),
    ],
)
def test_each_semantic_error_is_named(raw_default, mutation, fragment):
    with pytest.raises(PolicyError) as exc:
        parse_policy(_mutate(raw_default, mutation))
    assert any(fragment in e for e in exc.value.errors), exc.value.errors


def test_policy_check_cli_prints_lanes_and_exits_0():
    result = CliRunner().invoke(main, ["policy", "check"])
    assert result.exit_code == 0, result.output
    for lane in LANES:
        assert lane in result.output
    assert "9 lanes" in result.output
    assert "team limits in research_best_effort: default max_share=0.5, max_running=12" in result.output
    assert "approver role finops: may approve cost; members finops-lead@example.com" in result.output


def test_policy_check_cli_exits_2_with_all_errors():
    result = CliRunner().invoke(main, ["policy", "check", str(BROKEN)])
    assert result.exit_code == 2
    assert "9 problem(s)" in result.output
    assert "lanes.release_eval.quotas[0].borrowing_limit: set but lane has no cohort_name" in result.output


def test_unreadable_and_unparsable_files_are_named(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("lanes: [\n  a: b\n")
    with pytest.raises(PolicyError, match=r"<yaml> line \d+"):
        load_policy(bad)


def test_default_policy_cohort_tree_reserves_assurance_capacity(policy):
    tree = {c.name: c for c in policy.cohorts}
    assert tree["gpu-pool"].parent_name is None
    assert tree["assurance"].parent_name == "gpu-pool" and tree["batch"].parent_name == "gpu-pool"
    for lane in ("incident_response", "release_eval", "candidate_train"):
        assert policy.lane(lane).cohort_name == "assurance"
    assert policy.lane("research_best_effort").cohort_name == "batch"
    reserve = {q.flavor_name: q for q in tree["assurance"].quotas}
    # the reserve lends while idle and is reclaimed by preemption (issue 45): no lending_limit
    assert reserve["h100-ondemand"].nominal_quota == 8 and reserve["h100-ondemand"].lending_limit is None
    # Lanes' and cohorts' nominal quotas together fit each flavor's capacity.
    for flavor in policy.flavors:
        rows = [q for lane in policy.lanes.values() for q in lane.quotas]
        rows += [q for c in policy.cohorts for q in c.quotas]
        total = sum(q.nominal_quota for q in rows if q.flavor_name == flavor.name and q.resource == GPU)
        assert total <= flavor.capacity[GPU], flavor.name


def _with_cohorts(cohorts: list[dict]) -> dict:
    raw = yaml.safe_load((Path(__file__).parents[1] / "gpu_platform" / "policy" / "default.yaml").read_text())
    raw["cohorts"] = cohorts
    return raw


@pytest.mark.parametrize(
    ("cohorts", "message"),
    [
        (
            [{"name": "gpu-pool"}, {"name": "assurance", "parent_name": "nowhere"}, {"name": "batch", "parent_name": "gpu-pool"}],
            "cohorts[1].parent_name: unknown cohort 'nowhere'",
        ),
        (
            [
                {"name": "gpu-pool", "parent_name": "batch"},
                {"name": "assurance", "parent_name": "gpu-pool"},
                {"name": "batch", "parent_name": "assurance"},
            ],
            "the cohort tree has a cycle through 'gpu-pool'",
        ),
        (
            [
                {"name": "gpu-pool", "quotas": [{"flavor_name": "h100-ondemand", "nominal_quota": 2, "lending_limit": 1}]},
                {"name": "assurance", "parent_name": "gpu-pool"},
                {"name": "batch", "parent_name": "gpu-pool"},
            ],
            "cohorts[0].quotas[0].lending_limit: set on root cohort 'gpu-pool'; limits need a parent_name",
        ),
        (
            [
                {"name": "gpu-pool"},
                {"name": "assurance", "parent_name": "gpu-pool", "quotas": [{"flavor_name": "h100-ondemand", "nominal_quota": 20}]},
                {"name": "batch", "parent_name": "gpu-pool"},
            ],
            "flavors.h100-ondemand.capacity.nvidia.com/gpu: lanes' and cohorts' nominal quotas sum to 44",
        ),
        (
            [
                {"name": "gpu-pool"},
                {"name": "assurance", "parent_name": "gpu-pool", "quotas": [{"flavor_name": "b200", "nominal_quota": 1}]},
                {"name": "batch", "parent_name": "gpu-pool"},
            ],
            "cohorts[1].quotas[0].flavor_name: unknown flavor 'b200'",
        ),
    ],
)
def test_cohort_tree_errors_are_named(cohorts: list[dict], message: str) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(_with_cohorts(cohorts))
    assert any(message in e for e in exc.value.errors), exc.value.errors


def test_policy_check_prints_the_cohort_tree():
    res = CliRunner().invoke(main, ["policy", "check"])
    assert res.exit_code == 0, res.output
    # the assurance reserve lends while idle (no lending limit shown on its line)
    (line,) = [ln for ln in res.output.splitlines() if "assurance: h100-ondemand 8" in ln]
    assert "lends ≤" not in line
    tree = res.output[res.output.index("cohorts") :]
    assert tree.index("assurance") < tree.index("incident_response") < tree.index("batch") < tree.index("research_best_effort")


def _raw_policy() -> dict:
    from gpu_platform.policy.loading import default_policy_path

    return yaml.safe_load(default_policy_path().read_text())


def test_every_exclusive_flavor_gets_its_node_shape_from_its_node_pool(policy):
    shapes = {name: (s.gpus_per_node, s.full_nodes, s.topology_levels) for name, s in policy.node_shapes.items()}
    assert shapes == {
        "h100-ondemand": (8, 4, ("topology.kubernetes.io/zone", "kubernetes.io/hostname")),
        "l4-inference": (4, 6, ()),  # 24 L4s: 16 for batch, 8 for online serving
        "a100-spot": (8, 2, ()),
    }
    # fractional flavors (MIG slices, shared replicas) are not placed per node
    assert policy.node_shape("h100-mig") is None and policy.node_shape("l4-shared") is None
    h100 = policy.node_shape("h100-ondemand")
    assert [h100.placeable(n) for n in (1, 8, 12, 16, 32, 40)] == [True, True, False, True, True, False]
    assert h100.shape_of(16) == (2, 8) and h100.shape_of(6) == (1, 6)


def test_a_flavor_may_declare_its_own_node_size_and_levels():
    raw = _raw_policy()
    spot = next(f for f in raw["flavors"] if f["name"] == "a100-spot")
    spot["node_gpus"] = 4
    spot["capacity"]["nvidia.com/gpu"] = 18
    spot["topology_levels"] = ["example.com/rack", "kubernetes.io/hostname"]
    shape = parse_policy(raw).node_shape("a100-spot")
    assert (shape.gpus_per_node, shape.full_nodes, shape.node_sizes) == (4, 4, (4, 4, 4, 4, 2))
    assert shape.topology_levels == ("example.com/rack", "kubernetes.io/hostname")
    # no autoscaling block and no node_gpus: no node shape (quota only)
    raw = _raw_policy()
    raw.pop("autoscaling")
    assert parse_policy(raw).node_shapes == {}


def test_topology_levels_follow_kueues_rules():
    raw = _raw_policy()
    raw["autoscaling"]["node_pools"]["training"]["topology_levels"] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "Bad Label!",
        "topology.kubernetes.io/zone",
    ]
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    text = "\n".join(exc.value.errors)
    assert "autoscaling.node_pools.training.topology_levels[0]: kubernetes.io/hostname must be the last" in text
    assert "autoscaling.node_pools.training.topology_levels[2]: 'Bad Label!' is not a node label key" in text
    assert "autoscaling.node_pools.training.topology_levels: repeated level(s) topology.kubernetes.io/zone" in text
    raw = _raw_policy()
    raw["flavors"][0]["topology_levels"] = ["kubernetes.io/hostname", "x.io/rack"]
    with pytest.raises(PolicyError, match=r"flavors\[0\].topology_levels\[0\]"):
        parse_policy(raw)


def _with_afs(raw: dict, lane: dict | None = None, top: dict | None = None) -> dict:
    data = yaml.safe_load(yaml.safe_dump(raw))
    if lane is not None:
        data["lanes"]["research_best_effort"]["admission_fair_sharing"] = lane
    if top is not None:
        data["admission_fair_sharing"] = top
    return data


def test_admission_fair_sharing_is_opt_in_per_lane(raw_default):
    assert all(lane.admission_fair_sharing is None for lane in parse_policy(raw_default).lanes.values())
    p = parse_policy(_with_afs(raw_default, {"team_weights": {"perception": 2}}, {"usage_half_life": "24h"}))
    afs = p.lanes["research_best_effort"].admission_fair_sharing
    assert afs is not None and afs.team_weights == {"perception": 2}
    assert p.admission_fair_sharing.usage_half_life.total_seconds() == 24 * 3600
    assert p.admission_fair_sharing.usage_sampling_interval.total_seconds() == 300  # Kueue's default 5m


def test_admission_fair_sharing_errors_are_named_all_at_once(raw_default):
    bad = _with_afs(
        raw_default,
        {"team_weights": {"nobody": 1, "planning": 0}},
        {"usage_half_life": "0s", "usage_sampling_interval": "soon", "resource_weights": {"nvidia.com/gpu": -1}},
    )
    with pytest.raises(PolicyError) as exc:
        parse_policy(bad)
    text = "\n".join(exc.value.errors)
    for fragment in (
        "lanes.research_best_effort.admission_fair_sharing.team_weights.nobody: unknown team 'nobody'",
        "lanes.research_best_effort.admission_fair_sharing.team_weights: team weights must be > 0 (got planning=0",
        "admission_fair_sharing.usage_half_life: must be longer than 0",
        "admission_fair_sharing.usage_sampling_interval: not a duration: 'soon'",
        "admission_fair_sharing.resource_weights: resource weights must be >= 0",
    ):
        assert fragment in text, (fragment, exc.value.errors)


def test_policy_check_cli_exits_2_on_a_bad_admission_fair_sharing_block(raw_default, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_with_afs(raw_default, {"team_weights": {"nobody": 1}})))
    result = CliRunner().invoke(main, ["policy", "check", str(path)])
    assert result.exit_code == 2
    assert "admission_fair_sharing.team_weights.nobody: unknown team 'nobody'" in result.output
    assert "Traceback" not in result.output
