"""A request has a human name (its `name:` or file name), shown with owner, team and target in
`queue`, `explain`, the runs' tags and the `gpu_queue` materializations; `queue --owner/--team` filter."""

from __future__ import annotations

import json
import re
import shutil

import dagster as dg
import yaml
from click.testing import CliRunner

from assets.gate import GPU_QUEUE
from gpu_platform.cli import main
from gpu_platform.gate.tick import TAG_NAME, TAG_OWNER, TAG_REQUEST_ID, TAG_TARGET
from gpu_platform.requests.ledger import content_request_id
from gpu_platform.requests.model import RequestError, name_from_file, validate_request, validate_request_file
from tests.conftest import EXAMPLES
from tests.gate.helpers import raw_request, submit, tick


def _cli(ledger, *args, home=None):
    env = {"GPU_PLATFORM_HOME": str(home)} if home else {}
    return CliRunner().invoke(main, [*args, "--ledger", ledger.url], env=env, catch_exceptions=False)


def test_a_request_is_named_after_its_file_unless_it_names_itself(tmp_path, policy):
    path = tmp_path / "occupancy sweep [trial 3].yaml"
    shutil.copy(EXAMPLES / "research_best_effort.yaml", path)
    assert validate_request_file(path, policy).name == "occupancy sweep -trial 3-"
    named = tmp_path / "x.yaml"
    named.write_text(yaml.safe_dump({**raw_request("research_best_effort"), "name": "lr sweep 17"}))
    req = validate_request_file(named, policy)
    assert req.name == "lr sweep 17" and req.display_name == "lr sweep 17"
    assert req.target == "exp-occupancy-lr-sweep-17"  # the experiment it works on
    assert validate_request_file(EXAMPLES / "candidate_train.yaml", policy).target == "cand-perception-2026.12-rc1"
    assert name_from_file("dir/(((.yaml") is None


def test_a_bad_name_is_refused_with_its_field(policy):
    try:
        validate_request(raw_request("research_best_effort", name="bad\nname"), policy)
    except RequestError as exc:
        assert any(e.startswith("name:") for e in exc.errors), exc.errors
    else:
        raise AssertionError("a name with a newline was accepted")


def test_the_name_is_not_part_of_the_idempotency_key(tmp_path, policy):
    a, b = tmp_path / "first-name.yaml", tmp_path / "renamed.yaml"
    shutil.copy(EXAMPLES / "labeler_batch.yaml", a)
    shutil.copy(EXAMPLES / "labeler_batch.yaml", b)
    ra, rb = validate_request_file(a, policy), validate_request_file(b, policy)
    assert ra.name != rb.name and content_request_id(ra) == content_request_id(rb)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    first = CliRunner().invoke(main, ["submit", str(a), "--ledger", url])
    again = CliRunner().invoke(main, ["submit", str(b), "--ledger", url])
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    assert first.stdout.strip() == again.stdout.strip()
    assert "already recorded" in again.stderr


def _three_teams(ledger, policy):
    ids = {
        "ana": submit(ledger, policy, "candidate_train", name="cand rc1", owner="ana@example.com", output_artifact_ids=["m0"], gpu_count=8),
        "bo": submit(ledger, policy, "candidate_train", name="cand rc2", owner="bo@example.com", output_artifact_ids=["m1"], gpu_count=8),
        "cy": submit(ledger, policy, "candidate_train", name="cand rc3", owner="cy@example.com", output_artifact_ids=["m2"], gpu_count=8),
        # the fourth run fills the 32 H100s (idle reserves are lent), so the fifth, dee's, waits
        "eve": submit(ledger, policy, "candidate_train", name="cand rc3b", owner="eve@example.com", output_artifact_ids=["m2b"], gpu_count=8),
        "dee": submit(ledger, policy, "candidate_train", name="cand rc4", owner="dee@example.com", output_artifact_ids=["m3"], gpu_count=8),
    }
    return ids


def test_queue_shows_name_owner_target_and_filters_by_owner_and_team(env, policy):
    instance, ledger, resources, home = env
    ids = _three_teams(ledger, policy)
    tick(instance, resources)
    full = {r["request_id"]: r for r in json.loads(_cli(ledger, "queue", "--format", "json", home=home).output)}
    assert full[ids["ana"]]["name"] == "cand rc1" and full[ids["ana"]]["owner"] == "ana@example.com"
    assert full[ids["ana"]]["target"] == "cand-perception-2026.12-rc1"
    mine = json.loads(_cli(ledger, "queue", "--owner", "dee@example.com", "--format", "json", home=home).output)
    assert [r["request_id"] for r in mine] == [ids["dee"]]
    # the filtered view keeps the position the whole queue gives
    assert mine[0]["position"] == full[ids["dee"]]["position"]
    team = json.loads(_cli(ledger, "queue", "--team", "perception", "--format", "json", home=home).output)
    assert {r["request_id"] for r in team} == {rid for rid, r in full.items() if r["team"] == "perception"}
    assert json.loads(_cli(ledger, "queue", "--team", "nobody", "--format", "json", home=home).output) == []
    table = _cli(ledger, "queue", "--owner", "dee@example.com", home=home).output
    assert "cand rc4" in table and table.rstrip().endswith("waiting: 1")  # one row: dee's
    assert "no requests of owner nobody@x" in _cli(ledger, "queue", "--owner", "nobody@x", home=home).output


def test_explain_names_the_request_its_owner_and_target(env, policy):
    _, ledger, _, _ = env
    rid = submit(ledger, policy, "candidate_train", name="cand rc1", owner="ana@example.com")
    out = _cli(ledger, "explain", rid)
    assert out.exit_code == 0, out.output
    assert "cand rc1" in out.output and "ana@example.com" in out.output and "cand-perception-2026.12-rc1" in out.output
    doc = json.loads(_cli(ledger, "explain", rid, "--format", "json").output)
    assert (doc["name"], doc["owner"], doc["target"]) == ("cand rc1", "ana@example.com", "cand-perception-2026.12-rc1")


def test_runs_carry_name_owner_and_target_tags(env, policy):
    instance, ledger, resources, _ = env
    rid = submit(ledger, policy, "candidate_train", name="cand rc1", owner="ana@example.com")
    unnamed = submit(ledger, policy, "research_best_effort")
    tags = {r.tags[TAG_REQUEST_ID]: r.tags for r in tick(instance, resources).run_requests}
    assert tags[rid][TAG_NAME] == "cand rc1"
    assert tags[rid][TAG_OWNER] == "ana@example.com"
    assert tags[rid][TAG_TARGET] == "cand-perception-2026.12-rc1"
    assert tags[unnamed][TAG_NAME] == unnamed  # no name: the id stands in


def test_gpu_queue_materialization_leads_with_a_table_of_waiting_requests(env, policy):
    instance, ledger, resources, _ = env
    ids = _three_teams(ledger, policy)
    result = tick(instance, resources)
    _plotted, mat = result.asset_events
    assert isinstance(mat, dg.AssetMaterialization) and mat.asset_key == GPU_QUEUE
    assert next(iter(mat.metadata)) == "waiting"
    table = mat.metadata["waiting"]
    assert isinstance(table, dg.TableMetadataValue)
    assert [c.name for c in table.schema.columns] == ["request", "eta", "reason"]
    rows = [r.data for r in table.records if " — candidate_train #" in r.data["request"]]
    waiting = sorted((ledger.state(rid).details["position"], rid) for rid in ids.values()
                     if ledger.state(rid).state == "waiting")
    assert waiting and len(rows) == len(waiting)
    for row, (pos, rid) in zip(rows, waiting, strict=True):
        req = ledger.get(rid)
        # name, owner (team), GPUs and target, lane and position, the wait, then the id `explain` takes
        assert re.fullmatch(
            re.escape(f"{req.name} — {req.owner} ({req.team}), 8 GPUs for {req.target} — candidate_train #{pos}, "
                      "waited ") + r"\d+s" + re.escape(f" — {rid}"), row["request"]), row["request"]
        assert row["reason"] == ledger.state(rid).reason
    head = ledger.get(waiting[0][1])
    assert head.name.startswith("cand rc") and head.owner.endswith("@example.com")
    (lane,) = [r.data for r in mat.metadata["lanes"].records if r.data["lane"] == "candidate_train"]
    assert lane["head"].startswith(f"{head.name} ({head.owner}): ")
    # the instance accepts it as the daemon would record it
    instance.report_runless_asset_event(mat)
    assert instance.fetch_materializations(GPU_QUEUE, limit=5).records


def test_an_empty_queue_names_the_ledger_it_read_and_what_else_it_holds(tmp_path, monkeypatch, policy):
    from gpu_platform.cli.queue import _where
    from gpu_platform.requests.ledger import Ledger

    monkeypatch.setenv("COLUMNS", "400")  # one line per message, whatever the terminal
    fresh = Ledger(f"sqlite:///{tmp_path / 'fresh.db'}")
    out = _cli(fresh, "queue", home=tmp_path).output
    assert f"queue is empty in ledger {fresh.url} (it holds no requests)" in out
    done = Ledger(f"sqlite:///{tmp_path / 'done.db'}")
    rid = done.submit(validate_request_file(EXAMPLES / "research_best_effort.yaml", policy))
    done.record(rid, "finished", "ran to the end")
    out = _cli(done, "queue", home=tmp_path).output
    assert f"queue is empty in ledger {done.url} (nothing waits or runs; 1 ended request(s): --all lists them)" in out
    assert rid in _cli(done, "queue", "--all", home=tmp_path).output
    # a ledger URL with a password is shown without it
    done.url = "postgresql+psycopg://gp:hunter2@db.local/ledger"
    assert _where(done, count_ended=False) == "ledger postgresql+psycopg://gp:***@db.local/ledger"
