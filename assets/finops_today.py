"""Same-day cost: today's FinOps partition is rebuilt after workload runs finish.

`finops_today_sensor` (running by default) looks at the instance every two minutes; when a
workload run finished or failed since its cursor, it requests one `finops_daily` run for today's
partition ("today so far"), unless one for today is already queued or running. The 02:00 UTC
schedule rebuilds yesterday once more with the whole day's feeds (final).
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from gpu_platform.gate.tick import TAG_WORKLOAD
from gpu_platform.policy.model import WORKLOAD_KINDS

FINOPS_JOB = "finops_daily"
_FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE]
_ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
           dg.DagsterRunStatus.STARTED]


@dg.sensor(job_name=FINOPS_JOB, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Price today so far after each finished workload run (finops_daily for today's partition).")
def finops_today_sensor(context: dg.SensorEvaluationContext):
    since = datetime.fromisoformat(context.cursor) if context.cursor else None
    records = context.instance.get_run_records(
        filters=dg.RunsFilter(tags={TAG_WORKLOAD: list(WORKLOAD_KINDS)}, statuses=_FINISHED, updated_after=since),
        limit=100)
    if not records:
        return dg.SkipReason("no workload run finished since the last check")
    latest = max(r.update_timestamp for r in records)
    context.update_cursor(latest.isoformat())
    today = datetime.now(UTC).date().isoformat()
    active = context.instance.get_runs(filters=dg.RunsFilter(
        job_name=FINOPS_JOB, statuses=_ACTIVE, tags={"dagster/partition": today}), limit=1)
    if active:
        # the run in flight may have missed this finish: ask again next tick
        context.update_cursor(since.isoformat() if since else None)
        return dg.SkipReason(f"a finops_daily run for {today} is in flight")
    newest = max(records, key=lambda r: r.update_timestamp).dagster_run.run_id
    return dg.RunRequest(run_key=f"finops-today-{today}-{newest}", partition_key=today,
                         tags={"gpu-platform/finops": "today-so-far"})
