"""`gpu-platform demo seed --days N` and `gpu-platform demo run`: the living demo.

`seed` (idempotent; a marker file records a finished seed):
1. writes `$DAGSTER_HOME/dagster.yaml` from the policy;
2. submits the live requests: one per lane (`examples/requests/`), the release chain, a research
   sweep on borrowed H100s, the sweep's tuned run that waits on the research lane's daily budget
   (`gpu_platform.demo.identity`) and a release whose evidence misses a scenario suite
   (`examples/demo/`, all but the incident);
3. generates N days of history ending yesterday through the admission engine
   (`gpu_platform.demo.history`) into the ledger and the feeds under `$GPU_PLATFORM_HOME/feeds/`;
4. prices the newest `--price-days` days (default: all) in one Dagster run
   (`python -m assets.demo_seed price`, in-process, ~4 s per day here) and leaves any older ones
   to a backfill that `run` launches once the UI is up (at a priority below today's pricing).

`run` starts `dagster dev` under `gpu_platform.demo.supervisor` (Ctrl-C stops the whole process
tree within seconds), launches that backfill through Dagster's GraphQL API, and submits the
incident request (`examples/demo/incident_sev1.yaml`) once the gate would preempt running,
checkpointed research sweep trials for it (`gpu_platform.demo.incident`), so the preemption
happens early, while one watches, and the stopped runs resume from a checkpoint. On Ctrl-C it first terminates the runs in flight and
cancels the backfill through the API (so they end canceled, not failed), and after the stop
`python -m assets.demo_seed recover` marks what was cut short canceled and puts an unfinished
backfill's days back in the plan for the next `run`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import EXAMPLES, ROOT

if TYPE_CHECKING:
    from rich.console import Console

DEMO_REQUESTS = EXAMPLES.parent / "demo"
INCIDENT = DEMO_REQUESTS / "incident_sev1.yaml"
SERVICE_EXAMPLE = "online_serving.yaml"
"""The demo's service (`gpu_platform.demo.serving.EXAMPLE`), seeded with the history."""
MARKER = ".demo_seeded"
BACKFILL_FILE = "demo_backfill.json"
DEV_WARNING = "ignore:Function `dev_command` is superseded"


def _home() -> Path:
    return Path(os.environ.get("GPU_PLATFORM_HOME", "var")).resolve()


def _load(path: Path, policy):
    """A demo request with its idempotency key (the CLI's rule), so seeding twice records it once."""
    from gpu_platform.requests.ledger import content_request_id
    from gpu_platform.requests.model import validate_request_file

    req = validate_request_file(path, policy)
    return req if req.request_id else req.model_copy(update={"request_id": content_request_id(req)})


def live_request_files() -> list[Path]:
    # the demo's service runs from the first history day (gpu_platform.demo.serving), not as a live request
    files = [p for p in sorted(EXAMPLES.glob("*.yaml")) if p.name != SERVICE_EXAMPLE]
    files += sorted((EXAMPLES / "release_chain").glob("*.yaml"))
    return files + [p for p in sorted(DEMO_REQUESTS.glob("*.yaml")) if p != INCIDENT]


def write_project_config(path: Path, console: Console) -> bool:
    """Write the demo's project config at `path` (the CLI run beside it then reads `.demo`), unless
    a config the demo did not write is there (left alone, and said so)."""
    from gpu_platform.cli.project import DEMO_MARK, demo_config_text

    if path.exists() and not path.read_text(errors="replace").startswith(DEMO_MARK):
        console.print(f"demo: left {path} as it is (not written by the demo); the CLI reads the state it names")
        return False
    from gpu_platform.demo.identity import write_demo_policy

    dagster_home = Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None
    text = demo_config_text(_home(), dagster_home, path.parent, write_demo_policy(_home()))
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
        console.print(f"demo: wrote {path}: the CLI run in {path.parent} reads {_home()}")
    return True


def seed(days: int, price_days: int, console: Console, project_config: Path | None = None) -> dict | None:
    home = _home()
    marker = home / MARKER
    if marker.exists():
        if project_config is not None:
            write_project_config(project_config, console)
        console.print(f"demo: already seeded ({marker}); `rm -rf {home}` to start again")
        return None
    # what this seed creates, so a failed seed leaves nothing half-written behind
    dagster_home = Path(os.environ["DAGSTER_HOME"]).resolve() if os.environ.get("DAGSTER_HOME") else None
    created = [p for p in (home, dagster_home, project_config) if p is not None and not p.exists()]
    try:
        return _seed(home, days, price_days, console, project_config)
    except BaseException as exc:
        _undo(created, home, console, exc)
        raise


def _undo(created: list[Path], home: Path, console: Console, exc: BaseException) -> None:
    """Remove what a failed seed created; name what it could not remove (it existed before)."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
    removed = []
    for path in created:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if not path.exists():
            removed.append(str(path))
    if removed:
        console.print(f"demo: seed {why}; removed what it created: {', '.join(removed)}", soft_wrap=True, markup=False)
    if home not in created:
        console.print(f"demo: seed {why}; {home} existed before this seed and may hold part of it: "
                      f"`rm -rf {home}` to start again", soft_wrap=True, markup=False)


def _seed(home: Path, days: int, price_days: int, console: Console, project_config: Path | None) -> dict:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpu_platform.demo import history as demo_history
    from gpu_platform.demo.costs import demo_days
    from gpu_platform.demo.incident import approve_nominated
    from gpu_platform.demo.instance import write_instance_yaml
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import Ledger, default_ledger_url

    policy_path = os.environ.get("GPU_PLATFORM_POLICY") or None
    if project_config is not None and write_project_config(project_config, console) and policy_path is None:
        # the policy the config names (the demo's, gpu_platform/demo/identity.py) from the start:
        # the seed's pricing then judges budgets as every later run will
        policy_path = str(_home() / "policy.yaml")
    t0 = time.monotonic()
    home.mkdir(parents=True, exist_ok=True)
    if os.environ.get("DAGSTER_HOME"):
        console.print(f"demo: wrote {write_instance_yaml(Path(os.environ['DAGSTER_HOME']))}")
    policy = load_policy(policy_path)
    ledger = Ledger(default_ledger_url())
    span = demo_days(days)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("demo: live requests", total=1)
        live = [_load(p, policy) for p in live_request_files()]
        approve_nominated(ledger, live, ledger.submit_batch(live))
        progress.advance(task)
        task = progress.add_task(f"demo: {days} days through the admission engine", total=1)
        history = demo_history.generate(policy, span)
        demo_history.write_ledger(history, ledger, policy)
        from gpu_platform.demo.serving import add_service

        service = add_service(history, ledger, policy, home / "feeds")  # its pods go out with the history's feeds
        if service.get("skipped"):
            console.print(f"demo: no {service['service']} service: {service['skipped']}", markup=False)
        progress.advance(task)
        task = progress.add_task("demo: DCGM, node, pod and FOCUS feeds", total=len(span))
        written = demo_history.write_feeds(history, home / "feeds", policy, advance=lambda: progress.advance(task))
    stats = demo_history.summary(history)
    console.print(f"demo: {stats['jobs']} history jobs on {stats['nodes']} nodes, "
                  f"{sum(x['preempted'] for x in stats['lanes'].values())} preemptions, "
                  f"{sum(x['oom_retries'] for x in stats['lanes'].values())} OOM retries, "
                  f"{written / 1e6:.0f} MB of feeds")
    priced = span[-price_days:] if price_days > 0 else []
    later = span[: len(span) - len(priced)]
    if priced:
        cmd = [sys.executable, "-m", "assets.demo_seed", "price", "--from", priced[0].isoformat(),
               "--to", priced[-1].isoformat()]
        if later:
            cmd += ["--later-from", later[0].isoformat(), "--later-to", later[-1].isoformat()]
        env = {**os.environ, **({"GPU_PLATFORM_POLICY": policy_path} if policy_path else {})}
        if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
            raise click.ClickException("pricing the seeded days failed (see above)")
    summary = {**stats, "priced_now": [d.isoformat() for d in priced], "backfill": [d.isoformat() for d in later],
               "seconds": round(time.monotonic() - t0, 1), "seeded_at": datetime.now(UTC).isoformat()}
    (home / MARKER).write_text(json.dumps(summary, indent=1) + "\n")
    console.print(f"demo: seeded in {summary['seconds']} s")
    return summary


@click.group("demo")
def demo() -> None:
    """The living demo: seed history and feeds, then run the Dagster UI (see README, The demo)."""


@demo.command("seed")
@click.option("--days", default=30, show_default=True, type=click.IntRange(1, 366),
              help="Days of history, ending yesterday (UTC).")
@click.option("--price-days", default=None, type=click.IntRange(0, 366),
              help="Newest days priced before the UI opens (default: every day); the rest by a backfill "
                   "`demo run` launches.")
@click.option("--project-config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a project config here naming the demo's home (`make demo`: ./gpu-platform.yaml).")
def seed_cmd(days: int, price_days: int | None, project_config: Path | None) -> None:
    """Seed $GPU_PLATFORM_HOME and $DAGSTER_HOME (idempotent)."""
    from rich.console import Console

    seed(days, days if price_days is None else min(price_days, days), Console(stderr=True), project_config)


def _launch_backfill(url: str, home: Path, stop: threading.Event, log) -> None:
    from gpu_platform.demo.supervisor import follow_backfill, launch_backfill, wait_for_webserver
    from gpu_platform.gate.instance_config import BACKFILL_PRIORITY

    plan = home / BACKFILL_FILE
    if not plan.exists() or not wait_for_webserver(url, stop=stop):
        return
    doc = json.loads(plan.read_text())
    # below every other claim on the warehouse slot: today's pricing goes first (instance_config)
    backfill = launch_backfill(url, doc["asset_keys"], doc["partitions"],
                               f"demo history {doc['partitions'][0]} .. {doc['partitions'][-1]}",
                               tags=BACKFILL_PRIORITY)
    plan.rename(plan.with_suffix(".launched.json"))
    log(f"demo: backfill {backfill} prices {doc['partitions'][0]} .. {doc['partitions'][-1]} (UI: Runs > Backfills)")
    follow_backfill(url, backfill, stop, log)


def _incident_when_sweep_runs(url: str, stop: threading.Event, log, after_s: float, timeout_s: float = 600) -> None:
    """Submit the incident `after_s` after the gate would preempt a running research sweep trial
    for it (`gpu_platform.demo.incident.would_preempt`: a trial holds H100s the incident needs and
    has written a checkpoint), so the preemption happens early and every time; after `timeout_s`
    without that moment it is submitted anyway, and says so."""
    from gpu_platform.demo.incident import submit_incident, would_preempt
    from gpu_platform.demo.supervisor import wait_for_webserver
    from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint
    from gpu_platform.gate.tick import budget_period_start
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import ACTIVE_STATES, PENDING_STATES, Ledger, default_ledger_url

    if not wait_for_webserver(url, stop=stop):
        return
    policy = load_policy(os.environ.get("GPU_PLATFORM_POLICY") or None)
    incident = _load(INCIDENT, policy)
    ledger = Ledger(default_ledger_url())
    if ledger.known_ids([incident.request_id or ""]):
        return  # an earlier `demo run` submitted it
    trials = [_load(p, policy).request_id for p in sorted(DEMO_REQUESTS.glob("research_sweep_*.yaml"))]
    work_root = Path(os.environ.get("GPU_PLATFORM_WORK_ROOT") or _home() / "work")

    def checkpointed(rid: str) -> bool:
        return has_checkpoint(checkpoints_under(work_root, rid))

    deadline, victims = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline and not stop.is_set():
        now = datetime.now(UTC)
        victims = would_preempt(policy, ledger.states((*PENDING_STATES, *ACTIVE_STATES)), incident, trials,
                                checkpointed, now,
                                spent=ledger.reserved_by_lane(budget_period_start(policy.budget_period, now)))
        if victims:
            break
        stop.wait(3)
    if not victims and not stop.is_set():
        log(f"demo: no research sweep trial held the H100s the incident needs within {timeout_s:.0f} s; "
            "submitting it anyway")
    elif victims:
        log(f"demo: research sweep trial(s) {', '.join(victims)} hold the H100s the incident needs; "
            f"it arrives in {after_s:.0f} s")
    if stop.wait(after_s):
        return
    rid = submit_incident(ledger, incident)
    log(f"demo: incident {rid} submitted (16 H100s): watch research_best_effort be preempted in gpu_queue")


@demo.command("run")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=3000, show_default=True, type=int)
@click.option("--incident-after", default=45.0, show_default=True,
              help="Seconds after a research sweep trial holds the H100s the incident needs (and has a "
                   "checkpoint) before the incident arrives.")
@click.option("--no-incident", is_flag=True, help="Do not submit the incident request.")
@click.option("--stop-after", default=None, type=float, help="Stop by itself after this many seconds.")
def run_cmd(host: str, port: int, incident_after: float, no_incident: bool, stop_after: float | None) -> None:
    """Run `dagster dev` for the demo; Ctrl-C stops it and all its children within seconds."""
    from rich.console import Console

    from gpu_platform.demo.supervisor import supervise
    from gpu_platform.gate.tick import TAG_REQUEST_ID

    url = f"http://{host}:{port}"
    home = _home()
    stop = threading.Event()
    err = Console(stderr=True)

    def log(msg: str) -> None:
        err.print(msg)

    started = time.monotonic()

    def announce_ready() -> None:
        from gpu_platform.demo.supervisor import wait_for_webserver

        if wait_for_webserver(url, timeout=600.0, stop=stop):
            log(f"demo: the UI is ready on {url} ({time.monotonic() - started:.0f} s after start); open it")

    actions = [announce_ready, lambda: _launch_backfill(url, home, stop, log)]
    if not no_incident:
        actions.append(lambda: _incident_when_sweep_runs(url, stop, log, incident_after))

    def before_stop() -> None:
        from gpu_platform.demo.supervisor import cancel_in_flight

        # workload runs are left to `recover` (deleted there: the gate relaunches them)
        counts = cancel_in_flight(url, keep=lambda tags: TAG_REQUEST_ID in tags, timeout=5.0)
        if counts["backfills"] or counts["runs"]:
            log(f"demo: canceled {counts['backfills']} backfill(s) and {counts['runs']} run(s) in flight")

    dagster = str(Path(sys.executable).parent / "dagster")
    # `dagster dev` warns that `dg dev` supersedes it on every start: nothing a demo user can act on
    env = {**os.environ, "PYTHONWARNINGS": ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), DEV_WARNING]))}
    # every schedule of the demo is on, the evidence retention sweep's too (off by default elsewhere)
    env.setdefault("GPU_PLATFORM_RETENTION_SCHEDULE", "on")
    if os.environ.get("DAGSTER_HOME"):
        # runs a previous `demo run` left in flight hold pool slots forever: cancel them first
        subprocess.run([sys.executable, "-m", "assets.demo_seed", "recover"], cwd=ROOT, env=env, check=False)
    log(f"demo: Dagster UI on {url} (Ctrl-C stops everything)")
    try:
        code = supervise([dagster, "dev", "-w", str(ROOT / "workspace.yaml"), "-h", host, "-p", str(port)],
                         env=env, actions=actions, stop_after=stop_after, log=log, before_stop=before_stop)
    finally:
        stop.set()
    if os.environ.get("DAGSTER_HOME"):
        # what the stop cut short: canceled (not left running or failed), the backfill's days
        # back in the plan for the next start
        subprocess.run([sys.executable, "-m", "assets.demo_seed", "recover"], cwd=ROOT, env=env, check=False)
    sys.exit(code)
