"""Sites as MultiKueue worker clusters: the policy's `sites:` block, a request's `site`, the
engine and the simulator keeping a site's work on that site's flavors (its capacity), and the
step Job's flavor affinity naming the site's node label."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_platform.admission.engine import admit_until_stable
from gpu_platform.admission.policy_view import AdmittedRequest, from_policy
from gpu_platform.cli import main
from gpu_platform.cluster.jobs import flavor_affinity
from gpu_platform.cluster.names import LABEL_SITE
from gpu_platform.policy import PolicyError, load_policy, parse_policy
from gpu_platform.requests.model import RequestError, validate_request
from gpu_platform.simulate.scenarios import policy_scenario
from gpu_platform.simulate.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "examples" / "kueue-native" / "sites.yaml"
EXAMPLES = ROOT / "examples" / "requests"


@pytest.fixture(scope="module")
def sites_policy():
    return load_policy(SITES)


def _raw_sites() -> dict:
    return yaml.safe_load(SITES.read_text())


def _request(lane: str, **update) -> dict:
    raw = yaml.safe_load((EXAMPLES / f"{lane}.yaml").read_text())
    raw.update(update)
    return raw


def test_sites_place_flavors_and_label_them(sites_policy) -> None:
    assert sites_policy.site_flavors("pit-depot") == ("a100-spot",)
    assert sites_policy.site_flavors("sfo-depot") == ("h100-ondemand", "l4-inference", "h100-mig", "l4-shared")
    assert sites_policy.flavor("a100-spot").node_labels[LABEL_SITE] == "pit-depot"
    assert sites_policy.lane_sites("incident_response") == ("sfo-depot",)
    assert sites_policy.lane_sites("research_best_effort") == ("sfo-depot", "pit-depot")


def test_every_sites_problem_is_named_at_once() -> None:
    raw = _raw_sites()
    raw["sites"]["sfo-depot"]["flavors"] = ["a100-spot", "h200-nowhere"]
    raw["sites"]["pit-depot"]["node_pools"] = ["gpu-farm"]
    raw["sites"]["Bad_Name"] = {"kubeconfig_secret": "x", "flavors": []}
    raw["sites"]["empty"] = {"kubeconfig_secret": "Not A Secret"}
    raw["teams"]["perception"]["site"] = "mars"
    raw["autoscaling"]["provisioning"] = {"node_pools": ["gpu-farm"]}
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    text = "\n".join(exc.value.errors)
    for expected in (
        "sites.sfo-depot.flavors[1]: unknown flavor 'h200-nowhere'",
        "sites.pit-depot.node_pools[0]",
        "sites.Bad_Name.name",
        "sites.empty.kubeconfig_secret",
        "sites.empty: holds no flavor",
        "sites: flavor 'a100-spot' is on sites sfo-depot, pit-depot; a flavor lives on one site",
        "teams.perception.site: unknown site 'mars'",
        "autoscaling.provisioning.node_pools[0]",
    ):
        assert expected in text, (expected, text)


def test_a_lane_partly_on_sites_is_refused() -> None:
    raw = _raw_sites()
    raw["sites"]["pit-depot"]["flavors"] = []
    raw["sites"]["pit-depot"]["node_pools"] = []
    raw["sites"]["sfo-depot"]["node_pools"] = ["training"]
    raw["sites"]["pit-depot"]["flavors"] = ["a100-spot"]
    with pytest.raises(PolicyError) as exc:
        parse_policy(raw)
    text = "\n".join(exc.value.errors)
    assert "lanes.release_eval.quotas[1].flavor_name: flavor 'l4-inference' is on no site" in text
    assert "MultiKueue check covers every flavor" in text


def test_policy_check_exits_2_listing_site_errors(tmp_path: Path) -> None:
    raw = _raw_sites()
    raw["sites"]["sfo-depot"]["flavors"] = ["nope"]
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(main, ["policy", "check", str(bad)])
    assert res.exit_code == 2 and "sites.sfo-depot.flavors[0]: unknown flavor 'nope'" in res.output
    assert "Traceback" not in res.output


def test_unknown_site_is_a_validation_error_naming_the_field(sites_policy) -> None:
    with pytest.raises(RequestError) as exc:
        validate_request(_request("research_best_effort", site="mars-base"), sites_policy)
    assert any(e.startswith("site: unknown site 'mars-base' (sites of this policy: sfo-depot, pit-depot)") for e in exc.value.errors)


def test_a_site_without_the_lanes_gpu_type_is_refused(sites_policy) -> None:
    with pytest.raises(RequestError) as exc:
        validate_request(_request("incident_response", site="pit-depot"), sites_policy)
    (err,) = [e for e in exc.value.errors if e.startswith("site:")]
    assert "lane incident_response has no quota of nvidia.com/gpu on site pit-depot" in err
    assert "site pit-depot holds a100-spot" in err


def test_without_sites_the_site_stays_a_label(policy) -> None:
    req = validate_request(_request("research_best_effort", site="anywhere-at-all"), policy)
    assert req.site == "anywhere-at-all"


def _research(policy, rid: str, site: str | None, gpus: int = 4):
    raw = _request("research_best_effort", site=site or "sfo-depot", gpu_type="any", gpu_count=gpus, request_id=rid)
    req = validate_request(raw, policy)
    # `site` is required metadata in this policy; a request the gate holds without one may use any site
    return req if site is not None else req.model_copy(update={"site": None})


def test_the_engine_keeps_a_site_request_on_its_sites_flavors(sites_policy) -> None:
    reqs = [_research(sites_policy, "pit-1", "pit-depot"), _research(sites_policy, "sfo-1", "sfo-depot")]
    res = admit_until_stable(from_policy(sites_policy, pending=reqs, node_model=False))
    flavors = {a.name: a.flavor for a in res.admitted}
    assert flavors["pit-1"] == "a100-spot"
    assert sites_policy.site_of_flavor[flavors["sfo-1"]] == "sfo-depot"


def test_a_full_site_makes_its_request_wait_while_another_site_has_room(sites_policy) -> None:
    # pit-depot's only flavor (16 spot A100s) is full; sfo-depot has 32 idle H100s
    full = [
        AdmittedRequest(_research(sites_policy, f"run-{i}", "pit-depot", gpus=8), "a100-spot", admitted_at=0.0)
        for i in range(2)
    ]
    res = admit_until_stable(
        from_policy(sites_policy, admitted=full, pending=[_research(sites_policy, "pit-2", "pit-depot")], node_model=False)
    )
    assert [p.name for p in res.pending] == ["pit-2"] and not res.admitted
    # the same request with no site goes where there is room
    res = admit_until_stable(
        from_policy(sites_policy, admitted=full, pending=[_research(sites_policy, "any-2", None)], node_model=False)
    )
    assert [(a.name, a.flavor) for a in res.admitted] == [("any-2", "h100-ondemand")]


def test_the_step_jobs_affinity_names_only_the_sites_nodes(sites_policy) -> None:
    req = _research(sites_policy, "pit-1", "pit-depot")
    terms = flavor_affinity(req, sites_policy)["node_affinity"]["required_during_scheduling_ignored_during_execution"][
        "node_selector_terms"
    ]
    (term,) = terms
    assert {"key": LABEL_SITE, "operator": "In", "values": ["pit-depot"]} in term["match_expressions"]


def test_the_simulator_gives_each_site_its_own_capacity(sites_policy, tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    rows = ["job_id,submit_ts,duration_s,gpus,lane,site"]
    rows += [f"pit-{i},0,3600,8,research_best_effort,pit-depot" for i in range(3)]
    rows += ["free-0,0,3600,8,research_best_effort,", "bad-0,0,60,1,research_best_effort,mars-base"]
    trace.write_text("\n".join(rows) + "\n")
    loaded = load_trace(trace, lanes=frozenset(sites_policy.lanes), sites=frozenset(sites_policy.sites))
    assert [q.reason for q in loaded.quarantined] == [
        "site: 'mars-base' is not a site of the policy (sites: pit-depot, sfo-depot)"
    ]
    scenario = policy_scenario(sites_policy)
    by_id = {j.job_id: scenario.workload(j) for j in loaded.jobs}
    assert by_id["pit-0"].allowed_flavors == ("a100-spot",)
    assert "h100-ondemand" in by_id["free-0"].allowed_flavors
    res = admit_until_stable(
        from_policy(sites_policy, pending=[by_id[k] for k in ("pit-0", "pit-1", "pit-2", "free-0")], node_model=False)
    )
    # 16 spot A100s hold two 8-GPU jobs of pit-depot; the third waits though sfo-depot is idle
    assert {a.name for a in res.admitted} == {"pit-0", "pit-1", "free-0"}
    assert [p.name for p in res.pending] == ["pit-2"]


def test_policy_check_lists_sites_and_each_lanes_check() -> None:
    res = CliRunner().invoke(main, ["policy", "check", str(SITES)])
    assert res.exit_code == 0, res.output
    assert "site pit-depot: worker cluster via Secret multikueue-pit-depot; flavors a100-spot" in res.output
    assert "admission check in incident_response: gpu-platform-sites-sfo-depot" in res.output
