"""The admission gate in Dagster: submit from the Launchpad, admit by sensor, launch workload runs.

Thin by design: decisions come from `gpu_platform.gate.tick` (pure), this module only reads the
ledger and the instance's runs, records, launches and terminates, and reports the queue as
materializations of the `gpu_queue` asset (numbers from `gpu_platform.observe.queueview`).
"""

import json
import socket
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import dagster as dg

import assets.submit as launchpad
from assets.partitions import WORKLOAD_PARTITIONS
from assets.run_links import (
    TAG_SUBMIT_RUN,
    TAG_WORK_RUN,
    link_submit_runs,
    mark_submitted,
    request_runs_url,
    submit_runs_of,
)
from assets.submit import EXAMPLE as SUBMIT_EXAMPLE
from assets.submit import SubmitRequestConfig
from assets.workloads import JOB_FOR_WORKLOAD, kind_jobs
from gpu_platform.cluster.aging import sync_boosts
from gpu_platform.cluster.jobs import RUN_STEPS
from gpu_platform.cluster.readback import read_back, read_kueue, read_team_usage, record_read_back
from gpu_platform.gate.blockers import (
    TAG_PREEMPTED_BY,
    TAG_PREEMPTED_BY_NAME,
    TAG_RESUME_FROM,
    latest_checkpoint,
    preemptions_of,
    victim_run_message,
    victim_run_tags,
)
from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint_under
from gpu_platform.gate.tick import (
    TAG_ATTEMPT,
    TAG_FLAVOR,
    TAG_REQUEST_ID,
    Launch,
    RunInfo,
    TickPlan,
    budget_period_start,
    gc_paused,
    plan_tick,
    reconcile,
    record_plan,
)
from gpu_platform.observe.queueview import (
    LaneSnapshot,
    eta_text,
    flavor_rows,
    lane_snapshots,
    lane_summary,
    plotted_metadata,
    queue_digest,
    waiting_request_text,
    write_gate_snapshot,
)
from gpu_platform.observe.serving.replicas import current_replicas
from gpu_platform.policy import Policy
from gpu_platform.requests.approvals import retrospectives
from gpu_platform.requests.identity import IdentityError
from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, LedgerError, RequestState
from gpu_platform.requests.model import RequestError, validate_request
from gpu_platform.safeload.text import md_code
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings

GPU_QUEUE = dg.AssetKey("gpu_queue")
_RETRO_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("request_id", "string"), dg.TableColumn("approver", "string"),
    dg.TableColumn("why", "string", description="used (admitted on it) or expired"),
    dg.TableColumn("due_since", "string"),
])
"""gpu_queue's `break_glass_retrospectives_due`: what `gpu-platform approve --due` lists."""

gpu_queue = dg.AssetSpec(
    GPU_QUEUE,
    group_name="admission",
    kinds={"python"},
    description=(
        "The live GPU queue, materialized by `admission_sensor` whenever the queue changed (and at "
        "least every 5 minutes while it waits unchanged). Each materialization leads with `waiting`: "
        "every waiting request, lane by lane in priority order and in queue order within its lane, in three "
        "columns: request (name, owner and team, GPUs, target, lane and position, how long it waited, id), "
        "eta (the estimated start; after its upstream, a lower bound; or why there is none) and reason "
        "(naming what holds its GPUs); find your request by your owner e-mail or its name. Then `lanes` (per lane: "
        "its queue: waiting, GPUs pending, oldest wait, admitted, running, GPUs in use; and its head: the "
        "request at position 1, its owner and why it waits) and `by_flavor`. The tables are text that wraps, "
        "so they fit a laptop's screen. Open **Plots**: two per lane, from the observation each "
        "materialization comes with, `<lane>/gpus_pending` (GPUs the "
        "lane waits for) and `<lane>/oldest_wait_s` (seconds its oldest pending request has waited). "
        "Pending GPUs that climb mean the lane is at its quota; a growing oldest wait with few GPUs "
        "pending means the head is blocked (read its reason). "
        "Nothing to run by hand: the sensor reports it. "
        "`gpu-platform queue --owner ME` says the same on the command line; "
        "`gpu-platform explain REQUEST_ID` shows one request's decisions."
    ),
)


_STATUS = {
    dg.DagsterRunStatus.SUCCESS: "success",
    dg.DagsterRunStatus.FAILURE: "failure",
    dg.DagsterRunStatus.CANCELED: "canceled",
}


@dg.op(description="Validate a GPU job request (fail closed) and record it in the ledger.")
def submit_request_op(
    context: dg.OpExecutionContext, config: SubmitRequestConfig, ledger: LedgerResource, policy: PolicyResource
) -> str:
    try:
        req = validate_request(config.request_fields(), policy.load(), source="run config")
    except RequestError as exc:
        problems = list(exc.errors)
    else:
        problems = []
    if problems:
        # the listing is the failure: no chained RequestError traceback under it (`from None`),
        # and no retry (the same config fails the same way)
        raise dg.Failure(
            description=refusal_text(problems),
            metadata={"problems": dg.MetadataValue.md("\n".join(f"- {md_code(e)}" for e in problems))},
            allow_retries=False,
        ) from None
    try:
        # who launched it, resolved before anything is recorded (assets/submit.py, docs/approvals.md)
        identity = launchpad.launchpad_identity(context)
        request_id = ledger.ledger().submit(req, identity=identity, policy=policy.load())
    except (LedgerError, IdentityError) as exc:  # the ledger's (or the identity source's) one line says why
        problem = str(exc)
    else:
        problem = ""
    if problem:
        raise dg.Failure(description=f"request refused: {problem}", allow_retries=False) from None
    mark_submitted(context.instance, context.run_id, request_id)
    context.log.info(
        f"recorded {req.name or request_id} ({request_id}) in lane {req.lane}; the admission sensor takes it from here "
        f"and tags this run {TAG_WORK_RUN} with the run it launches (its runs: {request_runs_url(request_id)})"
    )
    context.add_output_metadata(
        {"request_id": request_id, "name": req.name or request_id, "owner": req.owner, "lane": req.lane,
         "gpus": req.gpu_count, "request_runs": dg.MetadataValue.url(request_runs_url(request_id))}
    )
    return request_id


def refusal_text(problems: list[str]) -> str:
    """A refused request's failure: how many problems, then one per line."""
    return f"request refused: {len(problems)} problem(s)\n" + "\n".join(f"- {e}" for e in problems)


@dg.job(
    description=(
        "Submit a GPU job request. The Launchpad opens with a working example (a research request); "
        "each field of `submit_request_op`'s config has a description and, where one makes sense, a "
        "default. Set owner, team and cost center to yours; leave request_id empty for a new id."
    ),
    config={"ops": {"submit_request_op": {"config": SUBMIT_EXAMPLE}}},
)
def submit_request():
    submit_request_op()


_STARTING = {dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING}


def _epoch(dt: datetime | None) -> float | None:
    if dt is None:
        return None
    return (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt).timestamp()


RUNS_FULL_READ_S = 600.0
"""Every run of the live requests is read in full again at least this often (seconds): the
backstop for a change `_runs` does not look for between full reads (a gate tag edited by hand)."""


@dataclass(slots=True)
class _RunCache:
    """The runs of the live requests as the last tick read them, kept between ticks (the sensor's
    process lives on): reading 2,000 runs in full deserializes each one (~0.13 ms apiece)."""

    instance_key: Any = None
    # run id -> (storage id, the run's RunInfo less starting_for, when its start phase began)
    runs: dict[str, tuple[int, RunInfo, float | None]] = field(default_factory=dict)
    full_at: float = float("-inf")


_RUN_CACHE = _RunCache()


def _instance_key(instance: dg.DagsterInstance) -> Any:
    """What names the instance's storage across ticks: its ref (a sensor may get a new instance
    object per tick), else the object itself (an ephemeral instance)."""
    try:
        return ("ref", instance.get_ref())
    except Exception:  # no ref (an ephemeral instance): only the same object is the same storage
        return ("object", instance)


def _run_entry(record) -> tuple[int, RunInfo, float | None]:
    run = record.dagster_run
    since = None
    if run.status in _STARTING:
        since = _epoch(record.create_timestamp if run.status == dg.DagsterRunStatus.NOT_STARTED else record.update_timestamp)
    info = RunInfo(
        run.run_id,
        run.tags[TAG_REQUEST_ID],
        int(run.tags.get(TAG_ATTEMPT, "0")),
        _STATUS.get(run.status, "active"),
        flavor=run.tags.get(TAG_FLAVOR, ""),
        phase=run.status.value,
    )
    return record.storage_id, info, since


def _runs(instance: dg.DagsterInstance, states: list[RequestState]) -> list[RunInfo]:
    """The runs of the requests admitted at least once: the gate launches a run only after it
    recorded the admission, so a request never admitted has none (the 50k pending of a long
    queue are not asked for). Newest run first, as `get_run_records` orders them.

    Read incrementally, through ids and statuses (which cost no deserialization): the ids of the
    requests' runs (new runs are read in full, the runs no longer there dropped), then which of the
    kept runs are still in the status last read; the runs whose status changed, and those in a start
    phase (whose timestamps say for how long), are read in full again. What else a kept run carries
    (its request, attempt and flavor tags) the gate sets when it launches it and never changes; the
    whole set is read again every RUNS_FULL_READ_S all the same."""
    request_ids = {s.request_id for s in states if s.attempts}
    cache = _RUN_CACHE
    key, clock = _instance_key(instance), time.monotonic()
    if cache.instance_key != key or clock - cache.full_at > RUNS_FULL_READ_S:
        cache.instance_key, cache.runs, cache.full_at = key, {}, clock
        if request_ids:
            for record in instance.get_run_records(filters=_tagged(request_ids)):
                cache.runs[record.dagster_run.run_id] = _run_entry(record)
    elif not request_ids:
        cache.runs = {}
    else:
        ids = instance.get_run_ids(filters=_tagged(request_ids))
        runs = cache.runs
        runs = cache.runs = {i: runs[i] for i in ids if i in runs}
        stale = [i for i in ids if i not in runs]
        by_phase: dict[str, list[str]] = {}
        for run_id, (_sid, info, since) in runs.items():
            if since is not None or info.phase not in _PHASES:
                stale.append(run_id)
            else:
                by_phase.setdefault(info.phase, []).append(run_id)
        for phase, run_ids in by_phase.items():
            still = set(instance.get_run_ids(filters=dg.RunsFilter(run_ids=run_ids, statuses=[_PHASES[phase]])))
            stale.extend(i for i in run_ids if i not in still)
        if stale:
            for run_id in stale:
                runs.pop(run_id, None)  # a run deleted meanwhile does not come back
            for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=stale)):
                runs[record.dagster_run.run_id] = _run_entry(record)
    now = datetime.now(UTC).timestamp()
    out = []
    for _sid, info, since in sorted(cache.runs.values(), key=_newest_first):
        out.append(info if since is None else replace(info, starting_for=max(0.0, now - since)))
    return out


_PHASES = {s.value: s for s in dg.DagsterRunStatus}


def _tagged(request_ids) -> dg.RunsFilter:
    # the gate's runs are the ones tagged with a request id (one job per workload kind)
    return dg.RunsFilter(tags={TAG_REQUEST_ID: sorted(request_ids)})


def _newest_first(entry: tuple[int, RunInfo, float | None]) -> int:
    return -entry[0]


_NOT_RUNNING_YET = {"QUEUED", "NOT_STARTED", "STARTING"}


def _stop_preempted(instance: dg.DagsterInstance, info: RunInfo, tags: dict[str, str], message: str) -> None:
    """Stop a preemption victim's run so it ends CANCELED with a message naming its preemptor.

    A run that has not started its step yet is marked canceled at once: terminating it instead
    leaves it CANCELING, and a run worker that then starts finds it CANCELING and marks it
    failed ("marked as failed from outside the execution context"). A started run is terminated
    through the run coordinator (its step is interrupted; the run ends CANCELED)."""
    instance.add_run_tags(info.run_id, tags)
    run = instance.get_run_by_id(info.run_id)
    if run is None or run.is_finished:
        return
    if run.status.value in _NOT_RUNNING_YET:
        instance.report_run_canceled(run, message=message)
        return
    instance.report_engine_event(message, run)
    instance.run_coordinator.cancel_run(info.run_id)


def _cancel_failed_victims(instance: dg.DagsterInstance, runs: list[RunInfo]) -> None:
    """A victim's run that still ended FAILURE (its worker raced the termination) is marked
    CANCELED with the preemption's message: a preempted run never shows as a failure."""
    failed = [r for r in runs if r.status == "failure"]
    if not failed:
        return
    for run in instance.get_runs(filters=dg.RunsFilter(run_ids=[r.run_id for r in failed])):
        if run.status == dg.DagsterRunStatus.FAILURE and TAG_PREEMPTED_BY in run.tags:
            instance.report_run_canceled(
                run,
                message=f"Preempted by {run.tags.get(TAG_PREEMPTED_BY_NAME, run.tags[TAG_PREEMPTED_BY])}: "
                f"canceled, not failed (it stopped before its termination took effect); resumes from "
                f"{run.tags.get(TAG_RESUME_FROM, 'start')}",
            )


def _last_flavor(led, request_id: str) -> str:
    """The flavor of the request's last admission (a stopping run without a flavor tag)."""
    admitted = [e for e in led.events(request_id) if e.event == "admitted" and e.flavor]
    return admitted[-1].flavor if admitted else ""


def _read_back(context, led, pol, settings: PlatformSettings, states, now: datetime):
    """Record what Kueue says about the gate's Jobs (ledger `cluster` events) and the Jobs the
    ledger cannot match (`gp_cluster_unmatched`), bring the priority boost of the Workloads Kueue
    holds pending to the one due now (`cluster.aging`); the states again."""
    namespaces = sorted({team.namespace for team in pol.teams.values()})
    try:
        observations = read_kueue(namespaces, settings.kubeconfig)
    except Exception as exc:  # the cluster unreachable must not stop admission; say so each tick
        context.log.warning(f"could not read Kueue Workloads back: {exc}")
        return states
    try:
        patches, problems = sync_boosts(pol, states, observations, now, settings.kubeconfig)
    except Exception as exc:  # like the read-back: admission goes on, and says so each tick
        patches, problems = [], [f"{type(exc).__name__}: {exc}"]
    for p in patches:
        context.log.info(f"aging: {p.text()}")
    if problems:
        context.log.warning("could not set the priority boost of: " + "; ".join(problems[:5]))
    rb = read_back(led, observations, states)
    record_read_back(led, rb)
    if rb.unmatched_new:
        context.log.warning(f"{len(rb.unmatched_new)} Job(s) on the cluster the ledger cannot match (recorded): "
                            + "; ".join(f"{r['namespace']}/{r['job']}: {r['why']}" for r in rb.unmatched_new[:5]))
    return led.states((*PENDING_STATES, *ACTIVE_STATES)) if rb.changed else states


def _team_usage(context, pol, settings: PlatformSettings):
    """Each team's LocalQueue usage on the lanes with Admission Fair Sharing, as Kueue reports it,
    so the gate orders their teams as Kueue does; None (every team unused) when it cannot be read."""
    try:
        return read_team_usage(pol, settings.kubeconfig)
    except Exception as exc:  # like the read-back: admission goes on, and says so each tick
        context.log.warning(f"could not read the teams' LocalQueue usage back (fair sharing orders by none): {exc}")
        return None


def _run_request(launch: Launch, run_config: dict[str, Any] | None = None, submit_run: str | None = None) -> dg.RunRequest:
    """The work run of one launch; `submit_run`: the Launchpad run that recorded the request, if any."""
    tags = dict(launch.tags)
    if submit_run:
        tags[TAG_SUBMIT_RUN] = submit_run
    return dg.RunRequest(
        run_key=launch.run_key,
        job_name=JOB_FOR_WORKLOAD[launch.workload],
        partition_key=launch.request_id,
        asset_selection=[dg.AssetKey(k) for k in RUN_STEPS[launch.workload]],
        tags=tags,
        run_config=run_config or {},
    )


def _link_submissions(context, led: Ledger, states: list[RequestState], runs: list[RunInfo]) -> None:
    """Point the Launchpad runs still waiting for their work run at it (`run_links`)."""
    def state_of(rid: str) -> str | None:
        try:
            return led.state(rid).state
        except Exception:  # a request the ledger does not know: the tag says unknown
            return None

    try:
        for submit, work in link_submit_runs(context.instance, runs, {s.request_id for s in states}, state_of):
            context.log.info(f"submit run {submit}: {TAG_WORK_RUN} = {work}")
    except Exception as exc:  # a link is a convenience: admission goes on, and says why each tick
        context.log.warning(f"could not link submit runs to their work runs: {exc}")


QUEUE_REFRESH_S = 300
"""`gpu_queue` is materialized when the queue changed, and at least this often while it does not
(so the oldest-wait plots keep growing)."""

WAITING_ROWS_PER_LANE = 200
"""Rows per lane in the `waiting` table; the rest are counted in `waiting_not_shown`
(`gpu-platform queue --all` lists every one)."""


def _queue_materialization(
    pol: Policy, led: Ledger, states: list[RequestState], plan: TickPlan, runs: list[RunInfo], now: datetime,
    cursor: str | None,
) -> tuple[list[dg.AssetObservation | dg.AssetMaterialization], str | None]:
    """The `gpu_queue` events when the queue changed since the last ones (or they are
    QUEUE_REFRESH_S old), and the sensor's next cursor; writes the per-lane view `/metrics` reads
    on every tick.

    Two events: an observation with the plotted numbers (`<lane>/gpus_pending`,
    `<lane>/oldest_wait_s`; the Plots tab draws observations and materializations alike), then
    the materialization with the tables, the newest event, which the Events tab opens on. Apart,
    the tables' event has only short metadata keys, so the UI's key column stays narrow and the
    tables fit a laptop's screen (the plot keys, 34 characters, took a third of it)."""
    by_req = {s.request_id: s for s in states}
    running = {
        r.request_id
        for r in runs
        if r.status == "active" and (s := by_req.get(r.request_id)) is not None and s.attempts == r.attempt
    }
    snaps = lane_snapshots(
        pol,
        states,
        now,
        admitted_now={x.request_id: x.flavor for x in plan.launches},
        requeued_now=[p.victim for p in plan.preemptions],
        rejected_now=[r.name for r in plan.rejections],
        waits=plan.waits,
        running_ids=running,
    )
    write_gate_snapshot(led.engine, snaps, now)
    digest = queue_digest(snaps)
    last = _last_materialized(cursor)
    if last is not None and last[0] == digest and now.timestamp() - last[1] < QUEUE_REFRESH_S:
        return [], cursor
    waiting = [(snap.lane, w) for snap in snaps for w in snap.waiting[:WAITING_ROWS_PER_LANE]]
    not_shown = sum(max(0, len(snap.waiting) - WAITING_ROWS_PER_LANE) for snap in snaps)
    metadata: dict[str, Any] = {
        "waiting": dg.MetadataValue.table(
            [dg.TableRecord(_waiting_record(lane, w)) for lane, w in waiting], schema=_WAITING_SCHEMA
        ),
        "lanes": dg.MetadataValue.table([dg.TableRecord(lane_summary(s)) for s in snaps], schema=_LANES_SCHEMA),
        "by_flavor": dg.MetadataValue.table(
            [dg.TableRecord({"lane": s.lane, **r}) for s in snaps for r in flavor_rows(pol, s)], schema=_FLAVOR_SCHEMA
        ),
    }
    if not_shown:
        metadata["waiting_not_shown"] = dg.MetadataValue.text(
            f"{not_shown} more waiting request(s): gpu-platform queue --all lists every one"
        )
    due = retrospectives(pol, led.approved_states(), now)
    if due:  # break-glass grants used or expired whose retrospective is open (docs/approvals.md)
        metadata["break_glass_retrospectives_due"] = dg.MetadataValue.table(
            [dg.TableRecord({"request_id": r.request_id, "approver": r.approver, "why": r.why,
                             "due_since": r.due_since.isoformat(timespec="seconds")}) for r in due],
            schema=_RETRO_SCHEMA,
        )
    plotted = dg.AssetObservation(GPU_QUEUE, description=_summary(snaps), metadata=plotted_metadata(snaps))
    event = dg.AssetMaterialization(GPU_QUEUE, description=_summary(snaps), metadata=metadata)
    return [plotted, event], json.dumps({"digest": digest, "at": now.timestamp()})


def _last_materialized(cursor: str | None) -> tuple[str, float] | None:
    try:
        doc = json.loads(cursor or "")
        return str(doc["digest"]), float(doc["at"])
    except (ValueError, KeyError, TypeError):  # no cursor yet, or one an older version wrote
        return None


def _summary(snaps: list[LaneSnapshot]) -> str:
    waiting = sum(s.pending for s in snaps)
    if not waiting:
        return "nothing waits"
    return f"{waiting} request(s) wait: " + ", ".join(f"{s.lane} {s.pending}" for s in snaps if s.pending)


_FLAVOR_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("lane", "string"),
        dg.TableColumn("flavor", "string"),
        dg.TableColumn("gpus_in_use", "int", description="held by admitted requests"),
        dg.TableColumn("gpus_pending", "int", description="asked for by pending requests (first flavor each may use)"),
    ]
)

_LANES_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("lane", "string", description="in priority order"),
        dg.TableColumn("queue", "string", description="requests waiting (submitted, waiting, requeued), the GPUs they "
                       "ask for and the oldest wait; requests admitted (holding quota), those with a live run, and "
                       "their GPUs"),
        dg.TableColumn("head", "string", description="the request at position 1, its owner, and why it waits"),
    ]
)
"""Three columns of text, like `waiting` (`lane_summary`): the numbers are in the Plots and in
`gpu-platform queue`."""


_WAITING_COLUMNS = (
    ("request", "string", "name — owner (team), GPUs for target — lane #position (`held`: before admission, e.g. "
     "WaitingForUpstream), how long it waited — its id for `gpu-platform explain`"),
    ("eta", "string", "estimated start (UTC); after its upstream a lower bound; or why there is none"),
    ("reason", "string", "why it waits, naming what holds its GPUs"),
)
"""Three columns of text that wraps: the asset page gives a table about 500 px on a 1366 px
screen (beside the navigation, the event list and the metadata keys), so who / when / why fit
it and a long reason wraps in its cell instead of pushing the table sideways.
`gpu-platform queue --format json` has every field on its own."""

_WAITING_SCHEMA = dg.TableSchema(
    columns=[dg.TableColumn(n, t, description=d or None) for n, t, d in _WAITING_COLUMNS]
)


def _waiting_record(lane: str, w) -> dict[str, Any]:
    return {"request": waiting_request_text(w, lane), "eta": eta_text(w), "reason": w.reason}


def _partition_requests(launches: list[Launch]) -> list[Any]:
    """Each launched request added to its own workload kind's partition set."""
    by_kind: dict[str, list[str]] = {}
    for launch in launches:
        by_kind.setdefault(launch.workload, []).append(launch.request_id)
    return [WORKLOAD_PARTITIONS[kind].build_add_request(ids) for kind, ids in sorted(by_kind.items())]


def _admission_sensor(
    context: dg.SensorEvaluationContext,
    ledger: LedgerResource,
    policy: PolicyResource,
    settings: PlatformSettings,
) -> dg.SensorResult | dg.SkipReason:
    with gc_paused():
        return _admission_tick(context, ledger, policy, settings)


def _admission_tick(
    context: dg.SensorEvaluationContext,
    ledger: LedgerResource,
    policy: PolicyResource,
    settings: PlatformSettings,
) -> dg.SensorResult | dg.SkipReason:
    pol, led = policy.load(), ledger.ledger()
    now = datetime.now(UTC)
    states = led.states((*PENDING_STATES, *ACTIVE_STATES))
    runs = _runs(context.instance, states)
    _link_submissions(context, led, states, runs)
    settled = reconcile(pol, states, runs, start_timeout=settings.run_start_timeout_seconds)
    if settled.events:
        led.record_many(settled.events)
        states = led.states((*PENDING_STATES, *ACTIVE_STATES))
    for stale in settled.terminate:
        context.log.info(f"terminating stale run {stale.run_id} of {stale.request_id} (attempt {stale.attempt})")
        if stale.phase in _NOT_RUNNING_YET:  # see _stop_preempted: CANCELING before a start ends FAILURE
            run = context.instance.get_run_by_id(stale.run_id)
            if run is not None and not run.is_finished:
                context.instance.report_run_canceled(
                    run, message=f"attempt {stale.attempt} of {stale.request_id} superseded before it started"
                )
        else:
            context.instance.run_coordinator.cancel_run(stale.run_id)
    team_usage = None
    if settings.executor == "k8s":
        states = _read_back(context, led, pol, settings, states, now)
        team_usage = _team_usage(context, pol, settings)

    work_root = settings.work_root_path()
    holding = {rid: flavor or _last_flavor(led, rid) for rid, flavor in settled.holding.items()}
    plan = plan_tick(
        pol,
        states,
        now,
        checkpointed=lambda rid: has_checkpoint_under(work_root, rid),
        draining=settled.draining,
        spent=led.reserved_by_lane(budget_period_start(pol.budget_period, now)),
        holding=holding,
        # gangs wait for whole free nodes of the policy's node shapes only in front of a cluster
        node_model=settings.executor == "k8s",
        preempted=preemptions_of(led, states),
        checkpoint_of=lambda rid: latest_checkpoint(checkpoints_under(work_root, rid)),
        team_usage=team_usage,
        # a running service holds the replicas it has now (the ledger's view, service_replicas_sensor)
        replicas=current_replicas(led, states),
    )
    record_plan(led, plan, states, hostname=socket.gethostname() if settings.executor == "local" else None)
    victims = {p.victim: p for p in plan.preemptions}
    by_req = {s.request_id: s for s in states}
    for run in runs:
        p = victims.get(run.request_id)
        if p is not None and run.status == "active":
            preemptor = by_req[p.preemptor].request if p.preemptor in by_req else None
            ckpt = latest_checkpoint(checkpoints_under(work_root, run.request_id))
            message = victim_run_message(
                by_req[run.request_id].request, run.attempt, p.preemptor, preemptor, p.reason, ckpt
            )
            context.log.info(f"preempting {run.request_id}: stopping run {run.run_id}: {message}")
            _stop_preempted(context.instance, run, victim_run_tags(p.preemptor, preemptor, ckpt), message)
    _cancel_failed_victims(context.instance, runs)

    # a service has no Dagster run: its replicas are the service_replicas_sensor's (assets/serving.py)
    launches = [x for x in settled.relaunch + plan.launches if x.workload != "service"]
    queue_events, cursor = _queue_materialization(pol, led, states, plan, runs, now, context.cursor)
    if not launches and not plan.preemptions and not settled.events:
        waiting = len(plan.waits)
        return dg.SensorResult(
            asset_events=queue_events,
            cursor=cursor,
            skip_reason="nothing to admit: no pending requests"
            if not waiting
            else f"{waiting} request(s) wait; head of queue: {plan.waits[0].message}",
        )
    by_id = {s.request_id: s.request for s in states}
    submitted = submit_runs_of(context.instance, [x.request_id for x in launches])
    if settings.executor == "k8s":
        from resources.k8s import k8s_run_config

        volume = settings.work_volume()
        run_requests = [
            _run_request(x, k8s_run_config(by_id[x.request_id], x.flavor, pol, x.attempt, volume),
                         submitted.get(x.request_id))
            for x in launches
        ]
    else:
        run_requests = [_run_request(x, submit_run=submitted.get(x.request_id)) for x in launches]
    return dg.SensorResult(
        run_requests=run_requests,
        asset_events=queue_events,
        cursor=cursor,
        dynamic_partitions_requests=_partition_requests(launches),
    )


def make_admission_sensor(jobs: list[Any]) -> dg.SensorDefinition:
    """The admission sensor, targeting the workload jobs (one per kind) it launches."""
    return dg.sensor(
        name="admission_sensor",
        jobs=jobs,
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Admits pending GPU requests by policy, launches them, and preempts per the engine.",
    )(_admission_sensor)


admission_sensor = make_admission_sensor(kind_jobs)
"""The sensor over the default-executor jobs (tests; `build_definitions` makes its own)."""



gate_assets = [gpu_queue]
gate_jobs = [submit_request]
gate_sensors = [admission_sensor]
