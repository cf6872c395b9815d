"""The Dagster half of the demo seed: price seeded days in the demo instance.

`gpu-platform demo seed` (gpu_platform/cli/demo.py) writes the ledger history and the feeds, then
runs `python -m assets.demo_seed price --from D1 --to D2 [--later-from D0 --later-to D3]`: one run
over the range D1..D2 materializes every ingest and cost asset (their single-run backfill policy:
one step per asset for all days), so the UI opens on priced days. The older days D0..D3 are left
to a Dagster backfill that `gpu-platform demo run` launches once the UI is up; their asset keys
and partitions are written to `$GPU_PLATFORM_HOME/demo_backfill.json` for it.

`python -m assets.demo_seed recover` (run by `demo run` before `dagster dev` starts) marks runs a
stopped demo left in flight as canceled (workload runs: deleted, so the gate launches them
again) and frees their pool slots.

Both register the seeded history's release chains as partitions of the workload assets
(`register_history`): without them a link to a past release (its lineage, a report) opened the
asset on another partition. Each stage that finished gets one materialization reported with the
history's own record (GPU-hours, attempts, upstream links), saying it was seeded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from assets.finops import WAREHOUSE_POOL, finops_assets
from assets.ingest import ingest_assets
from assets.partitions import WORKLOAD_PARTITIONS
from assets.workloads import asset_for_stage, dagster_metadata
from gpu_platform.demo.instance import HistoryStage, history_release_stages
from gpu_platform.demo.supervisor import DEMO_BACKFILL, DEMO_TAG
from gpu_platform.gate.tick import TAG_REQUEST_ID
from gpu_platform.lineage.graph import SUCCEEDED
from gpu_platform.workloads.stages import stage_metadata
from resources.build import build_resources

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
BACKFILL_FILE = "demo_backfill.json"


def price_range(first: date, last: date) -> bool:
    """Ingest and price first..last in one run in the instance at DAGSTER_HOME."""
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [*ingest_assets, *finops_assets], instance=instance, resources=build_resources("local"),
            run_config=quiet, raise_on_error=False,
            tags={RANGE_START: first.isoformat(), RANGE_END: last.isoformat(), "gpu-platform/demo": "seed_costs"})
        # set after the seed run: a pooled step polls for its slot, which only slows it down
        instance.event_log_storage.set_concurrency_slots(WAREHOUSE_POOL, 1)
    return result.success


def _with_progress(console: Console, title: str, work) -> bool:
    """Run `work` (one pricing run) with a progress bar of its steps: a thread follows the run's
    step events in the instance (the run executes in this process, so it cannot report itself)."""
    total = sum(len(a.keys) for a in (*ingest_assets, *finops_assets))
    done = threading.Event()
    seed_runs = dg.RunsFilter(tags={"gpu-platform/demo": "seed_costs"})
    with dg.DagsterInstance.get() as instance:
        before = {r.run_id for r in instance.get_runs(filters=seed_runs)}

    def follow(progress: Progress, task) -> None:
        with dg.DagsterInstance.get() as instance:
            run_id, seen = None, 0
            while not done.wait(1.0):
                if run_id is None:
                    new = [r.run_id for r in instance.get_runs(filters=seed_runs, limit=5) if r.run_id not in before]
                    if not new:
                        continue
                    run_id = new[0]
                records = instance.get_records_for_run(run_id, of_type={
                    dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}, limit=1000).records
                if len(records) != seen:
                    seen = len(records)
                    step = records[-1].event_log_entry.step_key or ""
                    progress.update(task, completed=seen, step=step)
                    if not console.is_terminal:
                        # no live bar in a log or a pipe: one line per model built
                        console.print(f"{title}: {seen}/{total} models built ({step})", soft_wrap=True)

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} models built"),
                  TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=console) as progress:
        task = progress.add_task(title, total=total, step="")
        thread = threading.Thread(target=follow, args=(progress, task), daemon=True)
        thread.start()
        try:
            ok = work()
        finally:
            done.set()
            thread.join(5)
        progress.update(task, completed=total if ok else progress.tasks[0].completed, step="")
    return ok


def write_backfill_plan(home: Path, first: date, last: date) -> Path:
    """Every ingest and cost asset: the daily ones for first..last, and the unpartitioned ones
    (pod and request staging, lifetime unit costs) once after them, which read every day."""
    days = [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
    path = home / BACKFILL_FILE
    keys = [k.to_user_string() for a in (*ingest_assets, *finops_assets) for k in a.keys]
    path.write_text(json.dumps({"asset_keys": keys, "partitions": days}, indent=1) + "\n")
    return path


IN_FLIGHT = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def cancel_stopped_backfills(instance: dg.DagsterInstance, home: Path | None = None) -> list[str]:
    """The demo's history backfills a stopped demo left requested or canceling: marked canceled
    (no daemon is left to finish them). With `home`, the days they were to price go back into
    the backfill plan, so the next `demo run` launches them again: nothing is silently left unpriced."""
    from dagster._core.execution.backfill import BulkActionStatus

    open_ = (BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING)
    out = []
    for backfill in instance.get_backfills(limit=100):
        if backfill.status not in open_ or backfill.tags.get(DEMO_TAG) != DEMO_BACKFILL:
            continue
        instance.update_backfill(backfill.with_status(BulkActionStatus.CANCELED))
        out.append(backfill.backfill_id)
    launched = (home / BACKFILL_FILE).with_suffix(".launched.json") if home else None
    if out and launched is not None and launched.exists() and not (home / BACKFILL_FILE).exists():
        launched.rename(home / BACKFILL_FILE)
    return out


def recover_stopped_runs(instance: dg.DagsterInstance | None = None) -> list[str]:
    """Runs a stopped demo left in flight (their processes are gone): free the pool slots they
    held, delete the workload runs (the gate relaunches their requests) and mark the others
    canceled, so neither the warehouse pool nor the gate waits on dead runs. Queued runs of the
    warehouse (no request id) are canceled too: a stopped demo leaves nothing waiting."""
    if instance is None:
        with dg.DagsterInstance.get() as owned:
            return recover_stopped_runs(owned)
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED])):
        if TAG_REQUEST_ID not in record.dagster_run.tags:
            instance.report_run_canceled(record.dagster_run, "the demo was stopped while this run was queued")
    runs = [r.dagster_run for r in instance.get_run_records(filters=dg.RunsFilter(statuses=list(IN_FLIGHT)))]
    for run in runs:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        if TAG_REQUEST_ID in run.tags:
            # a workload run: gone, so the gate launches the admitted request again under the
            # same run key (its crash path) and the work resumes from its checkpoint
            instance.delete_run(run.run_id)
        else:
            instance.report_run_canceled(run, "the demo was stopped while this run was in flight")
    # and any slot still claimed (or step still pending) by a run that is no longer going
    storage = instance.event_log_storage
    for pool in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(pool)
        holders = {s.run_id for s in info.claimed_slots} | {s.run_id for s in info.pending_steps}
        for run_id in holders:
            run = instance.get_run_by_id(run_id)
            if run is None or run.is_finished:
                storage.free_concurrency_slots_for_run(run_id)
    return [r.run_id for r in runs]


SEEDED = "seeded demo history: generated by `gpu-platform demo seed` through the admission engine, no Dagster run"


def register_history(instance: dg.DagsterInstance, resources: dict | None = None) -> tuple[int, int]:
    """Add the history's release-chain requests to their workload kinds' partition sets and
    report one materialization per finished stage of the ones added now (so a second call adds
    nothing). Returns (partitions added, materializations reported)."""
    res = resources or build_resources("local")
    stages = history_release_stages(res["ledger"].ledger(), res["policy"].load())
    wanted: dict[str, set[str]] = {}
    for st in stages:
        wanted.setdefault(WORKLOAD_PARTITIONS[st.workload].name, set()).add(st.request_id)
    added: set[tuple[str, str]] = set()
    for name, keys in sorted(wanted.items()):
        new = sorted(keys - set(instance.get_dynamic_partitions(name)))
        if new:
            instance.add_dynamic_partitions(name, new)
            added.update((name, k) for k in new)
    reported = 0
    for st in stages:
        if (WORKLOAD_PARTITIONS[st.workload].name, st.request_id) in added and st.run is not None \
                and st.run.status == SUCCEEDED:
            instance.report_runless_asset_event(_history_materialization(st, instance))
            reported += 1
    return len(added), reported


def _history_materialization(st: HistoryStage, instance: dg.DagsterInstance) -> dg.AssetMaterialization:
    asset = asset_for_stage(st.workload, st.stage)
    run = st.run
    assert run is not None
    req = st.request.model_copy(update={"request_id": st.request_id})
    md = dagster_metadata(stage_metadata(req, run, list(st.parents), None), asset, instance)
    ran = f" on {run.recorded_at:%Y-%m-%d %H:%M} UTC" if run.recorded_at else ""
    return dg.AssetMaterialization(
        asset, partition=st.request_id, description=f"{st.request.name or st.request_id}: finished{ran} ({SEEDED})",
        metadata={**md, "seeded_history": SEEDED, "finished_at": run.recorded_at.isoformat() if run.recorded_at else ""},
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m assets.demo_seed")
    sub = p.add_subparsers(dest="cmd", required=True)
    price = sub.add_parser("price", help="price seeded days in one run")
    price.add_argument("--from", dest="first", type=date.fromisoformat, required=True)
    price.add_argument("--to", dest="last", type=date.fromisoformat, required=True)
    price.add_argument("--later-from", type=date.fromisoformat, default=None)
    price.add_argument("--later-to", type=date.fromisoformat, default=None)
    sub.add_parser("recover", help="cancel runs a stopped demo left in flight, free their pool slots")
    args = p.parse_args(argv)
    console = Console(stderr=True)
    if args.cmd == "recover":
        home = Path(os.environ.get("GPU_PLATFORM_HOME", "var"))
        with dg.DagsterInstance.get() as instance:
            ids = recover_stopped_runs(instance)
            backfills = cancel_stopped_backfills(instance, home)
            try:
                added, _ = register_history(instance)
            except Exception as exc:  # the demo still starts; its past releases just have no partition
                console.print(f"demo: could not register the history's releases as partitions: {exc}")
                added = 0
        if added:
            console.print(f"demo: {added} history release-chain request(s) registered as partitions")
        if ids:
            console.print(f"demo: {len(ids)} run(s) in flight when the demo stopped marked canceled")
        if backfills:
            console.print(f"demo: history backfill {', '.join(backfills)} canceled; the next `demo run` prices its days")
        return 0
    with dg.DagsterInstance.get() as instance:
        added, reported = register_history(instance)
    console.print(f"demo: {added} history release-chain request(s) registered as partitions "
                  f"({reported} finished stage(s) materialized)")
    t0 = time.monotonic()
    ok = _with_progress(console, f"demo: pricing {args.first} .. {args.last}",
                        lambda: price_range(args.first, args.last))
    if not ok:
        console.print(f"demo: pricing {args.first} .. {args.last} failed; see the run in the Dagster UI")
        return 1
    console.print(f"demo: priced {args.first} .. {args.last} in {time.monotonic() - t0:.0f} s")
    if args.later_from and args.later_to:
        home = Path(os.environ.get("GPU_PLATFORM_HOME", "var"))
        write_backfill_plan(home, args.later_from, args.later_to)
        console.print(f"demo: {args.later_from} .. {args.later_to} will be priced by a backfill once the UI is up")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
