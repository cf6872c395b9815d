"""Run the demo's `dagster dev` and stop all of it on Ctrl-C within seconds.

`dagster dev` starts a webserver, a daemon and code servers as child processes and, on SIGTERM,
may wait on them for a minute or more. `supervise(cmd)` starts the command as the leader of a
new process group; on SIGINT or SIGTERM (or when `stop_after` elapses) it sends SIGTERM to every
process of that group and to every descendant it can find (`/proc`, in case one left the group),
waits `grace` seconds, then sends SIGKILL to whatever is left, by PID. So the whole tree is gone
within `grace` + a fraction of a second.

Meanwhile `actions` run in a background thread (the demo's: launch the backfill of the older
seeded days through Dagster's GraphQL API, submit the incident request once the research sweep
runs); they never block stopping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

GRACE_S = 5.0
DEMO_TAG = "gpu-platform/demo"
DEMO_BACKFILL = "backfill_history"
"""The tag (and its value) on the demo's history backfill and its runs."""
BEFORE_STOP_S = 6.0


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pids: Sequence[int], pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(proc: subprocess.Popen, grace: float = GRACE_S, log: Callable[[str], None] = print) -> float:
    """TERM the process group and every descendant of `proc`, KILL what is left after `grace`
    seconds; returns the seconds it took."""
    t0 = time.monotonic()
    pids = [proc.pid, *descendants(proc.pid)]
    _signal(pids, proc.pid, signal.SIGTERM)
    deadline = t0 + grace
    while time.monotonic() < deadline:
        proc.poll()
        pids = [p for p in pids if _alive(p)] + [p for p in descendants(proc.pid) if p not in pids]
        if not pids:
            break
        time.sleep(0.1)
    if pids:
        log(f"demo: {len(pids)} process(es) ignored SIGTERM for {grace:.0f} s; sending SIGKILL to {pids}")
        _signal(pids, proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    return time.monotonic() - t0


def supervise(cmd: Sequence[str], env: dict[str, str] | None = None, grace: float = GRACE_S,
              actions: Sequence[Callable[[], None]] = (), stop_after: float | None = None,
              log: Callable[[str], None] = print, before_stop: Callable[[], None] | None = None,
              before_stop_s: float = BEFORE_STOP_S) -> int:
    """Run `cmd` until it exits, a SIGINT / SIGTERM arrives or `stop_after` seconds pass; then stop
    its whole process tree (see the module doc). Returns 0 after a requested stop, else its exit code.

    before_stop: called once a stop is requested, while `cmd` still runs (the demo's: cancel its
    backfill and runs through the API, so they end canceled, not failed); given `before_stop_s`
    seconds at most, then the tree is stopped whatever it did."""
    proc = subprocess.Popen(list(cmd), env=env, start_new_session=True)
    stopping = threading.Event()

    def _request_stop(signum, _frame):  # type: ignore[no-untyped-def]
        stopping.set()

    previous = {s: signal.signal(s, _request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    for action in actions:
        threading.Thread(target=_guarded(action, stopping, log), daemon=True).start()
    started = time.monotonic()
    try:
        while proc.poll() is None and not stopping.is_set():
            if stop_after is not None and time.monotonic() - started > stop_after:
                stopping.set()
                break
            stopping.wait(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if proc.poll() is not None and not stopping.is_set():
        stop_tree(proc, grace, log)  # its children, if it left any
        return proc.returncode or 0
    log("demo: stopping dagster dev and its children ...")
    if before_stop is not None:
        worker = threading.Thread(target=_guarded(before_stop, threading.Event(), log), daemon=True)
        worker.start()
        worker.join(before_stop_s)
    took = stop_tree(proc, grace, log)
    log(f"demo: stopped in {took:.1f} s")
    return 0


def _guarded(action: Callable[[], None], stopping: threading.Event, log: Callable[[str], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            action()
        except Exception as exc:  # an action failing must not take the demo down; say why
            if not stopping.is_set():
                log(f"demo: {getattr(action, '__name__', 'action')} failed: {exc}")

    return run


# Dagster's GraphQL API ---------------------------------------------------------------------------


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 30.0) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"{url.rstrip('/')}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        doc = json.loads(resp.read())
    if doc.get("errors"):
        raise RuntimeError(f"GraphQL errors: {doc['errors']}")
    return doc["data"]


def wait_for_webserver(url: str, timeout: float = 180.0, stop: threading.Event | None = None) -> bool:
    """Poll `url`/server_info until the webserver answers and the code location is loaded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        try:
            data = graphql(url, "{ workspaceOrError { ... on Workspace { locationEntries { "
                                "locationOrLoadError { __typename } } } } }", timeout=5)
            entries = data["workspaceOrError"].get("locationEntries") or []
            if entries and all((e.get("locationOrLoadError") or {}).get("__typename") == "RepositoryLocation"
                               for e in entries):
                return True
        except (OSError, urllib.error.URLError, RuntimeError, KeyError, ValueError):
            pass
        time.sleep(1.0)
    return False


LAUNCH_BACKFILL = """
mutation LaunchBackfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on UnauthorizedError { message }
  }
}
"""


def launch_backfill(url: str, asset_keys: Sequence[str], partitions: Sequence[str], title: str,
                    tags: dict[str, str] | None = None) -> str:
    """Launch an asset backfill of `partitions` of `asset_keys` (its runs get `tags`); returns its id."""
    tags = {**(tags or {}), DEMO_TAG: DEMO_BACKFILL}
    params = {"assetSelection": [{"path": k.split("/")} for k in asset_keys], "partitionNames": list(partitions),
              "title": title, "tags": [{"key": k, "value": v} for k, v in tags.items()]}
    result = graphql(url, LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"backfill not launched: {result.get('message') or result['__typename']}")
    return result["backfillId"]


BACKFILL_PROGRESS = """
query Progress($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
  ... on PartitionBackfill { status assetBackfillData { assetBackfillStatuses { __typename
    ... on AssetPartitionsStatusCounts { numPartitionsTargeted numPartitionsMaterialized numPartitionsFailed }
    ... on UnpartitionedAssetStatus { materialized failed } } } } } }
"""


def backfill_progress(url: str, backfill_id: str, query: Callable[..., dict] | None = None) -> tuple[str, int, int, int]:
    """(status, asset partitions done, failed, targeted) of an asset backfill; an unpartitioned
    asset counts as one."""
    doc = (query or graphql)(url, BACKFILL_PROGRESS, {"id": backfill_id})["partitionBackfillOrError"]
    statuses = ((doc.get("assetBackfillData") or {}).get("assetBackfillStatuses")) or []
    done = failed = total = 0
    for st in statuses:
        if st["__typename"] == "AssetPartitionsStatusCounts":
            done += st["numPartitionsMaterialized"]
            failed += st["numPartitionsFailed"]
            total += st["numPartitionsTargeted"]
        else:
            done, failed, total = done + bool(st["materialized"]), failed + bool(st["failed"]), total + 1
    return doc.get("status") or doc["__typename"], done, failed, total


def follow_backfill(url: str, backfill_id: str, stop: threading.Event, log: Callable[[str], None],
                    every: float = 30.0, query: Callable[..., dict] | None = None) -> None:
    """Log the backfill's progress (`12/46 asset partitions priced`) when it moved, at most once
    per `every` seconds, and once more when it ends; returns when it ends or `stop` is set."""
    t0, last, last_at = time.monotonic(), None, 0.0
    while not stop.is_set():
        try:
            status, done, failed, total = backfill_progress(url, backfill_id, query)
        except (OSError, urllib.error.URLError, RuntimeError, KeyError, ValueError):
            stop.wait(every)
            continue
        ended = status not in ("REQUESTED", "CANCELING")
        if ended or ((done, failed) != last and time.monotonic() - last_at >= every):
            note = f", {failed} failed" if failed else ""
            log(f"demo: history backfill {done}/{total} asset partitions priced{note} "
                f"({time.monotonic() - t0:.0f} s){'' if not ended else f'; {status.lower()}'}")
            last, last_at = (done, failed), time.monotonic()
        if ended:
            return
        stop.wait(min(every, 5.0))


IN_FLIGHT_RUNS = """
{ runsOrError(filter: {statuses: [QUEUED, NOT_STARTED, STARTING, STARTED]}) {
    ... on Runs { results { runId tags { key value } } } } }
"""
TERMINATE = """
mutation Terminate($ids: [String!]!) {
  terminateRuns(runIds: $ids, terminatePolicy: SAFE_TERMINATE) { __typename }
}
"""
BACKFILLS = """{ partitionBackfillsOrError(status: REQUESTED) { ... on PartitionBackfills { results { id tags { key value } } } } }"""
CANCEL_BACKFILL = """
mutation Cancel($id: String!) { cancelPartitionBackfill(backfillId: $id) { __typename } }
"""


def cancel_in_flight(url: str, keep: Callable[[dict[str, str]], bool], timeout: float = 3.0) -> dict[str, int]:
    """Terminate every queued or running run whose tags `keep` does not claim, the way the UI's
    Terminate does (marked canceling at once, so the run ends CANCELED, not FAILURE, when its
    process stops), then cancel the demo's history backfills. Returns the counts."""
    runs = graphql(url, IN_FLIGHT_RUNS, timeout=timeout)["runsOrError"].get("results") or []
    ids = [r["runId"] for r in runs if not keep({t["key"]: t["value"] for t in r["tags"]})]
    if ids:
        graphql(url, TERMINATE, {"ids": ids}, timeout=timeout)
    backfills = graphql(url, BACKFILLS, timeout=timeout)["partitionBackfillsOrError"].get("results") or []
    canceled = 0
    for b in backfills:
        if {t["key"]: t["value"] for t in b["tags"]}.get(DEMO_TAG) == DEMO_BACKFILL:
            graphql(url, CANCEL_BACKFILL, {"id": b["id"]}, timeout=timeout)
            canceled += 1
    return {"backfills": canceled, "runs": len(ids)}


def main(argv: list[str]) -> int:  # pragma: no cover - `python -m gpu_platform.demo.supervisor CMD...`
    return supervise(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
