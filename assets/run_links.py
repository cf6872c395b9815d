"""Links between a Launchpad submission (`submit_request` run) and the work run the gate launches
for its request, both ways, as run tags the run page shows.

- The submit run tags itself with the request it recorded (`gpu-platform/submitted-request`) and
  `gpu-platform/work-run: not launched yet`; its output metadata links to the request's runs (a
  runs list filtered by the request id tag: empty until the gate launches it).
- The gate tags the work run it launches with `gpu-platform/submit-run` (the submit run's id);
  its workload step shows it as a run link (`submitted_by_run`) on the materialization.
- Once the work run exists, the gate's next tick sets the submit run's `gpu-platform/work-run`
  to its id and logs `launched as run ID: /runs/ID` in the submit run; a request that ended
  without a run (rejected) gets `none: request rejected`.

A submit run usually ends seconds before the gate admits its request, so its side of the link is
written afterwards, by the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urlencode

import dagster as dg

from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_REQUEST_ID, RunInfo

SUBMIT_JOB = "submit_request"
TAG_SUBMITTED_REQUEST = "gpu-platform/submitted-request"
"""On a `submit_request` run: the id of the request it recorded."""
TAG_WORK_RUN = "gpu-platform/work-run"
"""On a `submit_request` run: the run the gate launched for its request (WORK_RUN_PENDING before)."""
TAG_SUBMIT_RUN = "gpu-platform/submit-run"
"""On a work run: the `submit_request` run that recorded its request (Launchpad submissions only)."""
WORK_RUN_PENDING = "not launched yet"


def request_runs_url(request_id: str) -> str:
    """The UI's runs list filtered by the request's id tag: every run the gate launches for it."""
    return "/runs?" + urlencode({"q[]": f"tag:{TAG_REQUEST_ID}={request_id}"})


def mark_submitted(instance: dg.DagsterInstance, run_id: str, request_id: str) -> None:
    """Tag a submit run with the request it recorded, its work run not launched yet."""
    instance.add_run_tags(run_id, {TAG_SUBMITTED_REQUEST: request_id, TAG_WORK_RUN: WORK_RUN_PENDING})


def submit_runs_of(instance: dg.DagsterInstance, request_ids: Iterable[str]) -> dict[str, str]:
    """request id -> the first `submit_request` run that recorded it (requests submitted from the
    Launchpad; the CLI's have none)."""
    ids = sorted(set(request_ids))
    if not ids:
        return {}
    out: dict[str, str] = {}
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=SUBMIT_JOB, tags={TAG_SUBMITTED_REQUEST: ids}))
    for run in reversed(runs):  # oldest first: the first submission wins
        out.setdefault(run.tags[TAG_SUBMITTED_REQUEST], run.run_id)
    return out


def submitted_by_metadata(run: dg.DagsterRun | None) -> dict[str, dg.MetadataValue]:
    """A work run's link to the submit run that recorded its request, as step metadata."""
    submit = run.tags.get(TAG_SUBMIT_RUN) if run is not None else None
    return {"submitted_by_run": dg.MetadataValue.dagster_run(submit)} if submit else {}


def link_submit_runs(
    instance: dg.DagsterInstance,
    runs: list[RunInfo],
    live: set[str],
    state_of: Callable[[str], str | None],
) -> list[tuple[str, str]]:
    """Point every submit run still `not launched yet` at its request's newest work run, once
    there is one. runs: the live requests' runs, newest first (the gate's read); live: the
    requests pending or admitted (a request missing from both ended: its runs are looked up, and
    without one the submit run says how it ended); state_of: a request's ledger state.
    Returns (submit run, what its work-run tag now says)."""
    waiting = instance.get_runs(filters=dg.RunsFilter(job_name=SUBMIT_JOB, tags={TAG_WORK_RUN: WORK_RUN_PENDING}))
    if not waiting:
        return []
    newest: dict[str, RunInfo] = {}
    for info in runs:
        newest.setdefault(info.request_id, info)
    ended = sorted({r.tags.get(TAG_SUBMITTED_REQUEST, "") for r in waiting} - newest.keys() - live - {""})
    if ended:
        for run in instance.get_runs(filters=dg.RunsFilter(tags={TAG_REQUEST_ID: ended})):
            rid = run.tags[TAG_REQUEST_ID]
            if rid not in newest:
                newest[rid] = RunInfo(run.run_id, rid, int(run.tags.get(TAG_ATTEMPT, "0")), "")
    linked = []
    for submit in waiting:
        rid = submit.tags.get(TAG_SUBMITTED_REQUEST, "")
        work = newest.get(rid)
        if work is not None:
            instance.add_run_tags(submit.run_id, {TAG_WORK_RUN: work.run_id})
            instance.report_engine_event(
                f"request {rid} launched as run {work.run_id} (attempt {work.attempt}): /runs/{work.run_id}", submit
            )
            linked.append((submit.run_id, work.run_id))
        elif rid not in live:
            state = state_of(rid) or "unknown"
            instance.add_run_tags(submit.run_id, {TAG_WORK_RUN: f"none: request {state}"})
            linked.append((submit.run_id, f"none: request {state}"))
    return linked
