"""`make ui-check`: the demo UI in headless Chromium, checked through its pages and GraphQL API.

Seeds a short demo (`--days 3`, every day priced before the UI starts) under `var/ui-check/`,
starts it with `gpu-platform demo run` on a free port, waits until the live release chain has
run (one release blocked by its evidence pack's failing `replay_coverage` check, one passed),
then opens in Debian's chromium (headless, through Debian's chromedriver and selenium):

1. the asset graph (global lineage: the groups)            -> 01-asset-graph.png
2. the `workloads` group's lineage graph                   -> 02-workloads-lineage.png
3. the `gpu_queue` asset's plots                           -> 03-gpu-queue-plots.png
4. the blocked release's run                               -> 04-blocked-release-run.png
5. the `chargeback` cost asset's plots                     -> 05-chargeback-plots.png
6. a seeded history release's own partition page          -> 10-history-release.png

and plays three users:

- a researcher (ana@example.com) finds a waiting request of hers, by owner, in the `gpu_queue`
  materialization's `waiting` table (request, eta, reason: it fits a 1440 px window without
  scrolling sideways; every row with an ETA: a time, a lower bound after its upstream, or why
  none) with a reason naming its blocker (the request holding its GPUs or the one that
  preempted it, with lane and owner)                         -> 06-researcher-queue.png
  and the same request and reason in `gpu-platform queue --owner ana@example.com`; then opens a
  preempted run and reads it as Canceled, naming its preemptor -> 07-preempted-run.png
- a user opens `submit_request`'s Launchpad (its template filled in), clicks Launch Run, and
  follows the run to Success                                  -> 08-launchpad.png, 09-submit-run.png
  and the request it recorded in `gpu-platform explain`; once the gate launches the request, the
  submit run names its work run (tag `gpu-platform/work-run`, a log line `/runs/ID`) and the work
  run names the submit run (tag `gpu-platform/submit-run`)  -> 11-submit-linked.png, 12-work-run.png;
  a submission with missing fields fails with the validation listing as its failure, no chained
  traceback under it                                          -> 13-refused-submit.png;
- a release manager reads the blocked release's missing suite and the fix on its run page (4).

Each of these asserts what it saw (the page's text, and the same through GraphQL). Every CLI
line of the README's CLI section is run as printed (placeholders filled in with the demo's ids,
days and files; a line the check does not know fails), from the repository root with no
GPU_PLATFORM_* or DAGSTER_HOME variable: the seed writes `./gpu-platform.yaml` naming this check's home (a `gpu-platform.yaml`
already there is put aside under the output folder and put back afterwards), so they must find the
demo through the project config, say nothing about creating a new home, and show the demo's
requests. It also asserts what each page says (asset names, lanes, the check that blocked the release), and
through GraphQL that every lane is observed on `gpu_queue`, the workload and cost assets exist, the
blocked release's check names what is missing, its run's tags name the check, the suite and the fix,
and the cost asset has plotted (numeric) metadata; and that the numbers
the UI shows equal `gpu-platform cost report --format json` to the cent: each seeded day's chargeback
and billed totals and per-team table (that partition's own metadata) and every unit cost as of the day its asset names, released model and
map included. Stops the demo
(the supervisor stops the whole process tree) whatever happens. Exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.run_links import (  # noqa: E402
    TAG_SUBMIT_RUN,
    TAG_SUBMITTED_REQUEST,
    TAG_WORK_RUN,
    WORK_RUN_PENDING,
)
from gpu_platform.demo.costs import demo_days  # noqa: E402
from gpu_platform.demo.supervisor import graphql, wait_for_webserver  # noqa: E402

LANES = ("incident_response", "online_serving", "release_eval", "map_semantic_batch", "candidate_train", "platform_maintenance",
         "labeler_batch", "baseline_rebuild", "research_best_effort")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WINDOW = (1600, 1400)
LAPTOP = (1440, 900)
"""A laptop's screen (its CSS pixels; the navigation shown): the queue's waiting table must fit it."""
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RUNS = """query Runs($job: String!) { runsOrError(filter: {pipelineName: $job}) { ... on Runs { results {
  runId status tags { key value } } } } }"""
CHECKS = """query Checks($key: AssetKeyInput!, $name: String!) { assetCheckExecutions(assetKey: $key,
  checkName: $name, limit: 20) { runId evaluation { success description
  metadataEntries { label ... on TextMetadataEntry { text } } } } }"""
QUEUE = """{ assetOrError(assetKey: {path: ["gpu_queue"]}) { ... on Asset { assetMaterializations(limit: 40) {
  timestamp metadataEntries { label ... on TableMetadataEntry { table { records } } } } } } }"""
OBSERVED = """{ assetOrError(assetKey: {path: ["gpu_queue"]}) { ... on Asset { assetObservations(limit: 1) {
  timestamp metadataEntries { label } } } } }"""
PREEMPTED = """{ runsOrError(filter: {statuses: [CANCELED, FAILURE, CANCELING]}) { ... on Runs { results {
  runId status jobName tags { key value } } } } }"""
INSTIGATORS = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
  sensors { name sensorState { status } } schedules { name scheduleState { status } } } } } }"""
RUN = """query Run($id: ID!) { runOrError(runId: $id) { ... on Run { runId status jobName tags { key value } } } }"""
RESEARCHER = "ana@example.com"
"""The owner of the demo's research sweep (examples/demo/research_sweep_h100_*.yaml)."""
BLOCKER = re.compile(r"(preempted|held) by [^;]+? \([a-z_]+, [^,)]+@[^,)]+")
"""A reason that names its blocker: `preempted by NAME (lane, owner)` or `held by NAME (lane, owner, ...)`."""
NODES = "{ assetNodes { assetKey { path } groupName isPartitioned } }"
COST = """{ assetOrError(assetKey: {path: ["chargeback"]}) { ... on Asset { assetMaterializations(limit: 5) {
  partition metadataEntries { label __typename } } } } }"""


def wait_for_releases(url: str, timeout: float) -> tuple[str, str]:
    """(run id of the blocked release, run id of the passing one), once both runs have ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = graphql(url, RUNS, {"job": "release_model_job"})["runsOrError"]["results"]
        failed = [r["runId"] for r in runs if r["status"] == "FAILURE"]
        passed = [r["runId"] for r in runs if r["status"] == "SUCCESS"]
        if failed and passed:
            return failed[0], passed[0]
        time.sleep(5)
    raise AssertionError(f"the release runs did not both end within {timeout:.0f} s")


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def that(self, ok: bool, what: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)


def _button(driver, label: str):
    found = [b for b in driver.find_elements("xpath", f"//*[self::button or self::a][normalize-space()='{label}']")
             if b.is_displayed()]
    return found[0] if found else None


def _page_text(driver) -> str:
    """The visible text, plus the text drawn in the graph's SVG (asset nodes)."""
    svg = driver.execute_script("return Array.from(document.querySelectorAll('svg')).map(e => e.textContent).join(' ')")
    return driver.find_element("tag name", "body").text + " " + (svg or "")


def dismiss(driver) -> None:
    """Close Dagster's first-visit community dialog ("Skip") when it shows."""
    button = _button(driver, "Skip")
    if button is not None:
        button.click()
        time.sleep(1)


class Browser:
    """One headless Chromium for the whole check: `visit` opens a page, clicks, waits for the
    needles (case-insensitive: the UI upper-cases some labels), saves a screenshot and checks
    that each needle is on the page."""

    def __init__(self, url: str, out: Path, checks: Checks) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-dev-shm-usage", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
            opts.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.url, self.out, self.checks = url, out, checks

    def quit(self) -> None:
        self.driver.quit()

    def wait_for(self, needles, timeout: float = 30) -> str:
        from selenium.webdriver.support.ui import WebDriverWait

        want = [n.lower() for n in needles]
        try:
            WebDriverWait(self.driver, timeout).until(lambda d: all(x in _page_text(d).lower() for x in want))
        except Exception:  # the screenshot shows what was there instead
            pass
        return _page_text(self.driver)

    def visit(self, name: str, path: str, needles, clicks=(), settle: float = 3, timeout: float = 30,
              focus: str | None = None) -> str:
        """Open `path`, click `clicks`, wait for `needles`, screenshot as `name` and check them.
        `focus`: the text of a table cell to bring into view (scrolled to the middle, its row at the
        left edge of a wide table) before the screenshot, so the shot shows what is checked."""
        from selenium.webdriver.support.ui import WebDriverWait

        driver = self.driver
        driver.get(self.url + path)
        time.sleep(4)
        dismiss(driver)
        for label in clicks:
            try:
                button = WebDriverWait(driver, 30).until(lambda d, t=label: _button(d, t))
                button.click()
                if label == "Plots":  # the plots are below the fold: bring them up
                    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", button)
            except Exception:
                self.checks.that(False, f"{path}: no {label!r} button")
        self.wait_for(needles, timeout)
        time.sleep(settle)  # let plots and the graph layout settle
        if focus:
            driver.execute_script(
                "const cell = Array.from(document.querySelectorAll('td')).find(e => e.textContent.trim() === arguments[0]);"
                "if (cell) { cell.scrollIntoView({block: 'center', inline: 'start'}); }", focus)
            time.sleep(1)
        return self.shot(name, path, needles)

    def shot(self, name: str, what: str, needles) -> str:
        self.driver.save_screenshot(str(self.out / name))
        text = _page_text(self.driver)
        for needle in needles:
            self.checks.that(needle.lower() in text.lower(), f"{what} shows {needle!r} ({name})")
        return text


def browse(browser: Browser, blocked_run: str) -> None:
    pages = [
        ("01-asset-graph.png", "/asset-groups", (), ("admission", "workloads", "finops_raw", "finops")),
        ("02-workloads-lineage.png", "/locations/gpu_platform/asset-groups/workloads/lineage", (),
         ("label_batch", "training_run", "model_evidence_pack", "released_model", "released_map")),
        ("03-gpu-queue-plots.png", "/assets/gpu_queue", ("Plots",),
         ("research_best_effort/gpus_pending", "incident_response/oldest_wait_s")),
        # the release manager: which check, which suite is missing and what to run, on the run page
        ("04-blocked-release-run.png", f"/runs/{blocked_run}", (),
         ("model_evidence_pack_replay_coverage", "blocked by model_evidence_pack.replay_coverage",
          "missing eval-night-rain-v3", "to fix")),
        ("05-chargeback-plots.png", "/assets/chargeback", ("Plots",), ("total_cost_USD", "gpu_hours")),
    ]
    for name, path, clicks, needles in pages:
        browser.visit(name, path, needles, clicks)


ROOT_CLI = ".venv/bin/gpu-platform"
"""The CLI as the README prints it, run from the repository root."""


def bare_env() -> dict[str, str]:
    """The caller's environment without the variables that name the platform's state, so the
    CLI has to find the demo through `./gpu-platform.yaml`."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("GPU_PLATFORM_") or k.startswith("DAGSTER_"))}


BUSY = "is being written by another process"
"""What a warehouse command says when a demo run holds the warehouse for its whole wait: tried again."""


def readme_line(line: str, checks: Checks, expect: tuple[str, ...] = (), what: str = "", rc: int = 0,
                empty_in: Path | None = None) -> str:
    """Run one README CLI line as printed (bash, repository root, no state variables); exit `rc`
    (0 unless the README documents another), no new home created, and each of `expect` in its
    output. `empty_in`: a home whose ledger a `queue is empty` answer must name for that answer to
    count (the documented answer when nothing waits or runs); otherwise `queue is empty` fails
    (the CLI read some other home). Returns stdout."""
    created = (ROOT / "var" / "ledger.db").exists()
    for _attempt in range(4):
        proc = subprocess.run(["bash", "-c", line], cwd=ROOT, env=bare_env(), capture_output=True, text=True,
                              timeout=300)
        if BUSY not in proc.stdout + proc.stderr:
            break
        time.sleep(10)
    out = proc.stdout + proc.stderr
    flat = "".join(out.split())  # rich wraps long paths
    empty = "queue is empty" in out
    named = empty_in is not None and "".join(str(empty_in / "ledger.db").split()) in flat
    ok = proc.returncode == rc and "created a new home" not in proc.stderr and (not empty or named)
    ok = ok and (created or not (ROOT / "var" / "ledger.db").exists())
    missing = [] if empty and named else [e for e in expect if e not in out]
    checks.that(ok and not missing, f"README line `{line}` works as printed{what}"
                + (f" (exit {proc.returncode}; missing {missing}; {out.strip()[-300:]!r})" if not ok or missing else ""))
    return proc.stdout


def _records(mat: dict, label: str) -> list[dict]:
    for e in mat["metadataEntries"]:
        if e["label"] == label and e.get("table"):
            return [json.loads(r) for r in e["table"]["records"]]
    return []


def researcher(browser: Browser, url: str, checks: Checks, timeout: float) -> None:
    """A researcher finds her waiting request by owner in the queue view, with a reason that names
    what blocks it: in the `gpu_queue` table (UI) and in `gpu-platform queue --owner` (CLI)."""
    deadline, found = time.monotonic() + timeout, None
    while found is None and time.monotonic() < deadline:
        mats = graphql(url, QUEUE)["assetOrError"]["assetMaterializations"]
        for mat in mats[:1]:  # the latest: what the asset page shows first
            for row in _records(mat, "waiting"):
                if _owner(row.get("request") or "") == RESEARCHER and BLOCKER.search(row.get("reason") or ""):
                    found = (mat["timestamp"], row)
                    break
        if found is None:
            time.sleep(2)
    if found is None:
        checks.that(False, f"within {timeout:.0f} s, no gpu_queue materialization had a request of {RESEARCHER} "
                           "waiting with a reason naming its blocker")
        return
    ts, row = found
    blocker = BLOCKER.search(row["reason"]).group(0)
    name, request_id = _request_cell(row["request"])
    checks.that(True, f"gpu_queue's waiting table: {row['request']} waits: {row['reason'][:160]}")
    checks.that(bool(ETA.match(row.get("eta") or "")), f"its ETA says when or why not: {row.get('eta')!r}")
    doc = readme_line(f"{ROOT_CLI} queue --owner {RESEARCHER} --format json", checks, (request_id,))
    try:
        mine = {r["request_id"]: r for r in json.loads(doc or "[]")}
    except ValueError:
        mine = {}
    cli = mine.get(request_id)
    checks.that(bool(mine) and all(r["owner"] == RESEARCHER for r in mine.values()),
                f"queue --owner {RESEARCHER} lists only hers ({len(mine)} request(s))")
    checks.that(cli is not None and bool(BLOCKER.search(cli.get("reason") or "")),
                f"queue --owner names the same request's blocker: {(cli or {}).get('reason', '')[:160]!r}")
    readme_line(f"{ROOT_CLI} queue --owner {RESEARCHER}", checks, (name[:20],))
    # on a laptop's screen: the reason is read without scrolling sideways
    browser.driver.set_window_size(*LAPTOP)
    try:
        browser.visit("06-researcher-queue.png", f"/assets/gpu_queue?view=events&time={ts}",
                      (name, RESEARCHER, blocker, "waiting", row["eta"]), focus=row["request"])
        wide = browser.driver.execute_script(WIDTH, row["request"])
    finally:
        browser.driver.set_window_size(*WINDOW)
    checks.that(bool(wide) and wide[0] <= wide[1],
                f"the waiting table fits a {LAPTOP[0]} px wide window, no sideways scrolling (its right edge, "
                f"the visible area's: {wide})")


WIDTH = """
const t = Array.from(document.querySelectorAll('table')).find(e => e.querySelector('th') && e.textContent.includes(arguments[0]));
if (!t) { return null; }
let c = t.parentElement;
while (c && !['auto', 'scroll'].includes(getComputedStyle(c).overflowX)) { c = c.parentElement; }
const right = c ? Math.min(c.getBoundingClientRect().right, window.innerWidth) : window.innerWidth;
return [Math.round(t.getBoundingClientRect().right), Math.round(right)];
"""
"""The right edge of the table holding the text, and of the area it is seen through (its nearest
scrolling ancestor, within the window): the table fits when the first is not past the second."""


ETA = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d UTC|not before \d{4}-\d\d-\d\d \d\d:\d\d UTC \(.+\)|unknown: .+|soon: .+)$")
"""What the waiting table's eta column says: the engine's estimate, a lower bound after the
request's upstream, or why there is none. Never blank."""


def _owner(text: str) -> str:
    """The owner in the waiting table's request cell `NAME — OWNER (TEAM), GPUs ... — ...`."""
    parts = text.split(" — ")
    return parts[1].split(" (")[0].split(",")[0] if len(parts) > 1 else ""


def _request_cell(text: str) -> tuple[str, str]:
    """(name, request id) of the waiting table's request cell `NAME — WHO, GPUs — LANE #N, waited
    W — ID` (no id part when the request's name is its id)."""
    parts = text.split(" — ")
    return parts[0], parts[-1] if len(parts) > 3 else parts[0]


def preempted_run(browser: Browser, url: str, checks: Checks, timeout: float) -> None:
    """A preempted run reads Canceled, never Failure, and names its preemptor and resume point."""
    deadline, victims = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        runs = graphql(url, PREEMPTED)["runsOrError"]["results"]
        victims = [r for r in runs if any(t["key"] == "gpu-platform/preempted-by" for t in r["tags"])]
        if victims and all(r["status"] != "CANCELING" for r in victims):
            break
        time.sleep(3)
    if not victims:
        checks.that(False, f"within {timeout:.0f} s no run was preempted: the demo submits the incident once a "
                           "research sweep trial holds the H100s it needs and has a checkpoint (look for "
                           "`demo: incident ... submitted` in the demo's log above)")
        return
    checks.that(True, f"a preempted run exists ({len(victims)})")
    statuses = sorted({r["status"] for r in victims})
    checks.that(statuses == ["CANCELED"], f"every preempted run ended CANCELED, never FAILURE ({statuses})")
    def resume(r: dict) -> str:
        return next((t["value"] for t in r["tags"] if t["key"] == "gpu-platform/resume-from"), "")

    # the one a watcher opens: canceled, and resuming from a checkpoint when one does
    run = sorted(victims, key=lambda r: (r["status"] != "CANCELED", not resume(r).startswith("ckpt-")))[0]
    tags = {t["key"]: t["value"] for t in run["tags"]}
    name, ckpt = tags.get("gpu-platform/preempted-by-name", ""), resume(run)
    checks.that(bool(name) and ckpt.startswith("ckpt-"),
                f"its tags name the preemptor ({name}) and the checkpoint it resumes from ({ckpt})")
    browser.visit("07-preempted-run.png", f"/runs/{run['runId']}",
                  ("canceled", "preempted", name, "canceled, not failed", ckpt or "ckpt-"))


LAUNCHED_NAME = "occupancy lr sweep (Launchpad example)"
"""The name in `submit_request`'s Launchpad template (assets/submit.py EXAMPLE)."""


def launchpad(browser: Browser, url: str, checks: Checks, timeout: float) -> None:
    """A user opens submit_request's Launchpad, finds the template filled in, clicks Launch Run, and
    follows the run to Success; the request it recorded is in `gpu-platform explain`."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.visit("08-launchpad.png", "/locations/gpu_platform/jobs/submit_request/playground",
                  ("submit_request_op", "ana@example.com", "research_best_effort", "Launch Run"))
    driver = browser.driver
    try:
        button = WebDriverWait(driver, 30).until(
            lambda d: next((b for b in d.find_elements("xpath", "//button[contains(normalize-space(), 'Launch Run')]")
                            if b.is_displayed() and b.is_enabled()), None))
        button.click()
        WebDriverWait(driver, 60).until(lambda d: "/runs/" in d.current_url)
    except Exception as exc:
        browser.shot("08-launchpad.png", "the Launchpad after Launch Run", ())
        checks.that(False, f"Launch Run did not open a run ({type(exc).__name__}; at {driver.current_url})")
        return
    run_id = driver.current_url.split("/runs/", 1)[1].split("?")[0].split("/")[0]
    checks.that(True, f"Launch Run started run {run_id}")
    deadline, status = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        status = (graphql(url, RUN, {"id": run_id})["runOrError"] or {}).get("status")
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(3)
    checks.that(status == "SUCCESS", f"the submit_request run ended {status}")
    driver.refresh()
    text = browser.wait_for(("success", f"recorded {LAUNCHED_NAME}"))
    text = browser.shot("09-submit-run.png", f"/runs/{run_id}", ("success", f"recorded {LAUNCHED_NAME}"))
    m = re.search(re.escape(f"recorded {LAUNCHED_NAME} (") + r"([^)\s]+)\) in lane", text)
    checks.that(m is not None, "the run's log names the recorded request id")
    if m:
        readme_line(f"{ROOT_CLI} explain {m.group(1)}", checks, (LAUNCHED_NAME, RESEARCHER))
        submit_links(browser, url, checks, run_id, m.group(1), timeout)
    refused_submit(browser, url, checks, timeout=120)


def _tags(url: str, run_id: str) -> dict[str, str]:
    run = graphql(url, RUN, {"id": run_id})["runOrError"] or {}
    return {t["key"]: t["value"] for t in run.get("tags") or ()}


def submit_links(browser: Browser, url: str, checks: Checks, submit_run: str, request_id: str, timeout: float) -> None:
    """Once the gate launches the submitted request, the submit run names its work run (tag and a
    `/runs/ID` log line) and the work run names the submit run (tag)."""
    deadline, work = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        tags = _tags(url, submit_run)
        work = tags.get(TAG_WORK_RUN, "")
        if work and work != WORK_RUN_PENDING:
            break
        time.sleep(5)
    checks.that(tags.get(TAG_SUBMITTED_REQUEST) == request_id,
                f"the submit run is tagged with the request it recorded ({tags.get(TAG_SUBMITTED_REQUEST)})")
    if not work or work == WORK_RUN_PENDING or work.startswith("none"):
        checks.that(False, f"within {timeout:.0f} s the submit run's {TAG_WORK_RUN} tag did not name a work run "
                           f"({work!r}; `gpu-platform explain {request_id}` says why)")
        return
    checks.that(_tags(url, work).get(TAG_SUBMIT_RUN) == submit_run,
                f"its work run {work} is tagged {TAG_SUBMIT_RUN} = {submit_run}")
    # the run page shows its tags under "View tags and config"; the log line is on the page
    browser.visit("11-submit-linked.png", f"/runs/{submit_run}", (TAG_WORK_RUN, work, f"/runs/{work}"),
                  clicks=(RUN_TAGS,))
    browser.visit("12-work-run.png", f"/runs/{work}", (TAG_SUBMIT_RUN, submit_run), clicks=(RUN_TAGS,))


RUN_TAGS = "View tags and config"
"""The run page's button that shows the run's tags."""


LAUNCH = """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
FAILURE = """query Failure($id: ID!) { runOrError(runId: $id) { ... on Run { status eventConnection(afterCursor: null) {
  events { __typename ... on ExecutionStepFailureEvent { error { message cause { message } } } } } } } }"""


def refused_submit(browser: Browser, url: str, checks: Checks, timeout: float) -> None:
    """A Launchpad submission missing fields ends with the validation listing as its failure, with
    no chained traceback (the validator's) under it."""
    params = {"selector": {"repositoryLocationName": "gpu_platform", "repositoryName": "__repository__",
                           "jobName": "submit_request"},
              "runConfigData": {"ops": {"submit_request_op": {"config": {"lane": "release_eval",
                                                                         "name": "refused (ui-check)"}}}}}
    launched = graphql(url, LAUNCH, {"params": params})["launchRun"]
    run_id = (launched.get("run") or {}).get("runId")
    if not run_id:
        checks.that(False, f"the refused submission did not launch: {launched}")
        return
    deadline, run = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        run = graphql(url, FAILURE, {"id": run_id})["runOrError"] or {}
        if run.get("status") in ("FAILURE", "SUCCESS", "CANCELED"):
            break
        time.sleep(3)
    errors = [e["error"] for e in (run.get("eventConnection") or {}).get("events", [])
              if e["__typename"] == "ExecutionStepFailureEvent" and e.get("error")]
    message = errors[0]["message"] if errors else ""
    checks.that(run.get("status") == "FAILURE" and "request refused" in message and "owner: required" in message
                and errors[0]["cause"] is None,
                f"a submission missing fields fails with the listing and no chained traceback ({message[:120]!r})")
    browser.visit("13-refused-submit.png", f"/runs/{run_id}", ("request refused", "owner: required"))


HISTORY_KEYS = """{ assetNodeOrError(assetKey: {path: ["released_model"]}) { ... on AssetNode { partitionKeys } } }"""


def history_release(browser: Browser, url: str, checks: Checks) -> None:
    """A seeded history release is a partition of released_model: its page opens on it, showing it
    was seeded (not another partition in its place)."""
    keys = graphql(url, HISTORY_KEYS)["assetNodeOrError"].get("partitionKeys") or []
    past = [k for k in keys if k.startswith("hist-")]
    checks.that(bool(past), f"released_model has the history's releases as partitions ({len(past)} of {len(keys)})")
    if past:
        mats = graphql(url, LATEST, {"key": {"path": ["released_model"]}, "p": [past[-1]]})
        mats = (mats["assetOrError"] or {}).get("assetMaterializations") or []
        checks.that(bool(mats) and mats[0]["partition"] == past[-1],
                    f"the history release {past[-1]} has its own materialization")
        browser.visit("10-history-release.png", f"/assets/released_model?view=partitions&partition={past[-1]}",
                      (past[-1], "seeded demo history"))
        # the UI moves the focus (and the URL) to another partition when the one asked for is missing
        at = browser.driver.current_url
        checks.that(f"partition={past[-1]}" in at, f"the page stayed on that partition ({at})")


def readme_cli_lines() -> list[str]:
    """Every CLI line of every ```bash block of the README (the role paths of its first screen and
    the `## The CLI` block) as printed, without their comments, each once."""
    text = (ROOT / "README.md").read_text()
    lines: list[str] = []
    for block in text.split("```bash\n")[1:]:
        for line in block.split("```", 1)[0].splitlines():
            if line.startswith(ROOT_CLI + " "):
                lines.append(line.split("  #", 1)[0].strip())
    return list(dict.fromkeys(lines))


def _serve_metrics(checks: Checks, printed: str) -> None:
    """`metrics serve --port P` runs until stopped: start it, read /metrics, stop it."""
    import urllib.request

    port = free_port()
    line = printed.replace("9464", str(port))
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=ROOT, env=bare_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    body, deadline = "", time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None and not body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(1)
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    lanes = [lane for lane in LANES if f'lane="{lane}"' in body]
    checks.that(bool(body) and lanes == list(LANES) and "created a new home" not in (out or ""),
                f"README line `{line}` works as printed (/metrics has every lane: {len(lanes)} of {len(LANES)})"
                + ("" if body else f" ({(out or '').strip()[-300:]!r})"))


def readme_checks(checks: Checks, blocked_release: str, home: Path, out: Path) -> None:
    """Every line of the README's CLI section against the running demo, as printed (placeholders
    filled in with the demo's ids, days and files; outputs under `out/cli/`). A README line this
    table does not know fails: a new line gets its check when it is added."""
    from gpu_platform.cli.demo import DEMO_REQUESTS, INCIDENT, _load
    from gpu_platform.policy import load_policy

    cli, outdir = ROOT_CLI, out / "cli"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    policy = load_policy(None)
    trial = _load(DEMO_REQUESTS / "research_sweep_h100_1.yaml", policy).request_id
    # the sweep's tuned run waits on the research lane's daily budget (gpu_platform/demo/identity.py)
    tuned = _load(DEMO_REQUESTS / "research_tuned_h100.yaml", policy).request_id
    incident = _load(INCIDENT, policy).request_id
    # a request of the user's own (new content: a new id), so `approve` has one that has not ended
    mine = outdir / "ana-lr-probe.yaml"
    mine.write_text((ROOT / "examples" / "requests" / "research_best_effort.yaml").read_text()
                    .replace("exp-occupancy-lr-sweep-17", "exp-occupancy-lr-probe-1")
                    .replace("ckpt-exp17-occupancy", "ckpt-exp17-lr-probe-1") + "\nname: lr probe (README check)\n")
    mine_id = _load(mine, policy).request_id
    yesterday, today = demo_days(1)[-1].isoformat(), time.strftime("%Y-%m-%d", time.gmtime())
    trace = "tests/fixtures/simulate/elasticflow-cluster04-head2000.csv"
    R = tuple[str, tuple[str, ...], dict]
    runs: dict[str, list[R]] = {
        "policy check [FILE]": [
            ("policy check", ("research_best_effort", "incident_response"), {}),
            ("policy check gpu_platform/policy/default.yaml", ("research_best_effort",), {})],
        "request validate FILE...": [
            (f"request validate {DEMO_REQUESTS.relative_to(ROOT)}/research_sweep_h100_1.yaml {mine}",
             ("ok ", "research_sweep_h100_1.yaml", "lane research_best_effort"), {})],
        "submit FILE...": [(f"submit {mine}", (mine_id,), {})],
        "queue [--all] [--owner O] [--team T] [--format json]": [
            ("queue", ("research_best_effort",), {"empty_in": home}),
            ("queue --all", ("research_best_effort", "incident_response", "finished"), {}),
            (f"queue --owner {RESEARCHER}", (RESEARCHER,), {}),
            ("queue --all --team perception --format json", ('"team": "perception"', trial), {})],
        "explain REQUEST_ID [--format json]": [
            (f"explain {trial}", (trial, RESEARCHER), {}),
            (f"explain {incident} --format json", (incident, "gus@example.com"), {})],
        "approve REQUEST_ID --role ROLE --kind safety|cost|incident --reason TEXT [--approver NAME]": [
            # as the demo's caller (its OS login, the demo policy's demo-operator role): not on
            # `mine`, which that caller submitted (nobody approves their own: docs/approvals.md);
            # the request waiting BudgetExhausted, whose reason names this command
            (f"explain {tuned}", (tuned, "BudgetExhausted", f"gpu-platform approve {tuned} --kind cost"),
             {"what": " (the tuned run waits on its budget)"}),
            (f"approve {tuned} --role demo-operator --kind cost --reason 'tuned run over budget'",
             (tuned, '"kind": "cost"'), {})],
        "metrics serve --port 9464": [],  # _serve_metrics
        "autoscale plan": [("autoscale plan", ("desired",), {})],
        "report --out DIR [--days 7]": [(f"report --out {outdir}/report --days 3", ("index.html",), {})],
        "admit --cases FILE": [("admit --cases tests/fixtures/admission/lanes.yaml", ("passed",), {})],
        "kueue export --out DIR": [(f"kueue export --out {outdir}/kueue", ("clusterqueue",), {})],
        "deploy render --out DIR": [(f"deploy render --out {outdir}/deploy", ("kubectl apply -k",), {})],
        "deploy render --out DIR --helm-values values.yaml --image REPO:TAG --postgres-host H": [
            (f"deploy render --out {outdir}/deploy-helm --helm-values {outdir}/values.yaml "
             "--image registry.local/gpu-platform:demo --postgres-host pg.local", ("values.yaml",), {})],
        "k8s render REQUEST_FILE": [("k8s render examples/requests/candidate_train.yaml", ("kind: Job", "kueue"), {})],
        "dagster-config --out dagster.yaml [--postgres] [--k8s]": [
            (f"dagster-config --out {outdir}/dagster.yaml", ("wrote",), {}),
            (f"dagster-config --out {outdir}/dagster-k8s.yaml --postgres --k8s", ("wrote",), {})],
        # no cluster here: the documented answer is exit 1 with one line saying why
        "cluster sync [--kubeconfig F] [--dry-run] [--format json]": [
            ("cluster sync --dry-run", ("no Kubernetes configuration",), {"rc": 1, "what": " (no cluster here: exit 1, one line)"})],
        "lineage ID [--json]": [
            (f"lineage {blocked_release}", ("blocked by",), {}),
            (f"lineage {blocked_release} --json", ("replay_coverage",), {})],
        "retention sweep [--dry-run]": [("retention sweep --dry-run", (), {})],
        "feeds ingest --day D [--dcgm PATH_OR_URL...] [--focus PATH...] [--nodes PATH | --from-cluster] "
        "[--pods PATH | --from-cluster] [--volumes PATH | --from-cluster] [--requests PATH...] [--format table|json]": [
            (f"feeds ingest --day {yesterday} --format json", ("accepted",), {})],
        "cost build --day YYYY-MM-DD": [(f"cost build --day {yesterday}", (yesterday,), {})],
        "cost report --day YYYY-MM-DD --format table|json": [
            ("cost report --day $(date -u +%F)", (today,), {}),
            (f"cost report --day {yesterday} --format json", ('"totals"', '"unit_costs"'), {})],
        "cost export --day YYYY-MM-DD [--format focus|csv|parquet] [--out FILE]": [
            (f"cost export --day {yesterday}", ("BilledCost", "EffectiveCost", "x_AllocationLine"), {}),
            (f"cost export --day {yesterday} --format csv", ("effective_cost", "request"), {})],
        "scorecard --day YYYY-MM-DD [--format json]": [
            (f"scorecard --day {yesterday}", (yesterday,), {}),
            (f"scorecard --day {yesterday} --format json", (yesterday,), {})],
        "simulate --trace CSV [--policy FILE] [--compare fifo,fifo-backfill,strict] [--capacity N] "
        "[--node-model policy [--gang-split smallest|largest]] [--out DIR]": [
            (f"simulate --trace tests/fixtures/simulate/hand-fifo.csv --compare fifo,fifo-backfill,strict "
             f"--out {outdir}/simulate", ("fifo-backfill",), {}),
            ("simulate --trace tests/fixtures/simulate/elasticflow-cluster04-head2000.csv --lane-map elasticflow "
             "--capacity 640 --compare fifo-flavors-backfill --node-model policy --gang-split largest --quiet",
             ('"gang_split": "largest"',), {})],
        "simulate --generator FILE": [
            ("simulate --generator tests/fixtures/simulate/kueue-tiny-generator.yaml", ("simulation_wall_s",), {})],
        "policy tune --trace CSV [--lane-map M] [--policy FILE] [--capacity N] [--trials 40] --out DIR": [
            # at 320 GPUs, a load 2,000 jobs of the trace leave some room at: on the policy's own 74 GPUs
            # each trial simulates a pool overloaded many times over (docs/simulator.md, Performance)
            (f"policy tune --trace {trace} --lane-map elasticflow --capacity 320 --trials 2 --out {outdir}/tune",
             ("tuned_policy",), {})],
        "demo seed --days 30": [("demo seed --days 30", ("already seeded",), {})],
        "demo run": [],  # the demo this check runs
        # the README's first screen: one path per role, each line as printed
        "queue": [("queue", ("research_best_effort",), {"empty_in": home})],
        "explain REQUEST_ID": [],  # with the id the researcher's submit printed (below)
        "cost report --day $(date -u -d yesterday +%F) --format table": [
            ("cost report --day $(date -u -d yesterday +%F) --format table", (yesterday,), {})],
        "report --out var/report": [("report --out var/report", ("index.html",), {})],
        "policy check": [("policy check", ("research_best_effort", "incident_response"), {})],
        "kueue export --out var/kueue": [("kueue export --out var/kueue", ("clusterqueue",), {})],
        "simulate --trace tests/fixtures/simulate/elasticflow-cluster04-head2000.csv --lane-map elasticflow "
        "--compare fifo --out var/simulate": [
            ("simulate --trace tests/fixtures/simulate/elasticflow-cluster04-head2000.csv --lane-map elasticflow "
             "--compare fifo --out var/simulate", ("fifo",), {})],
    }
    researcher = "submit examples/requests/research_best_effort.yaml --again"
    submitted: list[str] = []
    for printed in readme_cli_lines():
        key = printed.removeprefix(ROOT_CLI + " ")
        if key not in runs and key != researcher:
            checks.that(False, f"README line `{printed}` has no check in scripts/ui_check.py (readme_checks)")
        elif key == "metrics serve --port 9464":
            _serve_metrics(checks, printed)
        elif key == "demo run":
            checks.that(True, f"README line `{printed}`: the demo under this check (started with it)")
        elif key == researcher:
            # the newcomer's first submit: a request id (the demo's own while live, a new run once it ended)
            got = readme_line(f"{cli} {researcher}", checks, ("req-",)).strip().splitlines()
            submitted.extend(got[-1:])
            if submitted:
                readme_line(f"{cli} queue --all --format json", checks, (submitted[0],),
                            what=" (the researcher's submitted request is in the queue)")
        elif key == "explain REQUEST_ID":
            rid = submitted[0] if submitted else trial
            readme_line(f"{cli} explain {rid}", checks, (rid,))
        for line, expect, kw in runs.get(key, ()):
            readme_line(f"{cli} {line}", checks, expect, **kw)


LATEST = """query Latest($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(partitions: $p, limit: 1) { partition metadataEntries { label
  ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue }
  ... on TextMetadataEntry { text } ... on MarkdownMetadataEntry { mdStr } } } } } }"""
PRICING = """{ runsOrError(filter: {pipelineName: "finops_daily", statuses: [QUEUED, NOT_STARTED, STARTING, STARTED]}) {
  ... on Runs { results { runId } } } }"""
CENT = 0.01


def shown(url: str, asset: str, partition: str | None = None) -> dict[str, float]:
    """The numbers the UI shows for `asset` (its latest materialization, of `partition` if given)."""
    mats = graphql(url, LATEST, {"key": {"path": [asset]}, "p": [partition] if partition else None})
    mats = (mats["assetOrError"] or {}).get("assetMaterializations") or []
    if not mats:
        return {}
    return {e["label"]: float(e.get("floatValue", e.get("intValue"))) for e in mats[0]["metadataEntries"]
            if e.get("floatValue") is not None or e.get("intValue") is not None}


def shown_text(url: str, asset: str, partition: str | None = None) -> list[tuple[str, str]]:
    """The text and markdown entries the UI shows for `asset`, in the UI's order (label, value)."""
    mats = graphql(url, LATEST, {"key": {"path": [asset]}, "p": [partition] if partition else None})
    mats = (mats["assetOrError"] or {}).get("assetMaterializations") or []
    if not mats:
        return []
    return [(e["label"], e.get("text", e.get("mdStr"))) for e in mats[0]["metadataEntries"]
            if e.get("text") is not None or e.get("mdStr") is not None]


def cost_report(env: dict[str, str], day: str) -> dict:
    cli = str(Path(sys.executable).parent / "gpu-platform")
    out = subprocess.run([cli, "cost", "report", "--day", day, "--format", "json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def number_checks(url: str, env: dict[str, str], days: list[str], checks: Checks) -> None:
    """What the UI shows equals `cost report --format json`, to the cent: each seeded day's
    chargeback and billed totals and its per-team table, which leads the partition's metadata (its
    own partition's), and every unit cost as of the day the unit-cost asset names (as_of_day)."""
    for day in days:
        report = cost_report(env, day)
        charge, recon = shown(url, "chargeback", day), shown(url, "reconciliation", day)
        texts = shown_text(url, "chargeback", day)
        lead = texts[0] if texts else ("", "")
        teams = [r for r in report["chargeback_by_team"] if not r["team"].startswith("(")]
        checks.that(lead[0] == "by_team_md" and all(f"| {r['team']} |" in lead[1] for r in teams)
                    and all(f"| {Decimal(r['total_cost']):.2f} |" in lead[1] for r in teams),
                    f"chargeback {day} leads with the per-team table of cost report's {len(teams)} team(s): "
                    f"first entry {lead[0]!r}")
        for t in report["totals"]:
            cur = t["currency"]
            ui, cli = charge.get(f"total_cost_{cur}"), float(t["chargeback_total"])
            checks.that(ui is not None and abs(ui - cli) <= CENT,
                        f"chargeback {day} in the UI: {ui} {cur}; cost report: {cli:.2f}")
            ui, cli = recon.get(f"billed_cost_{cur}"), float(t["billed"])
            checks.that(ui is not None and abs(ui - cli) <= CENT,
                        f"reconciliation {day} billed in the UI: {ui} {cur}; cost report: {cli:.2f}")
    # unit costs: each asset shows the day it is as of (units complete by its end); `cost report
    # --day` of that day must say the same. Compare when no pricing run is in flight, and once more
    # if one slipped in between the two reads
    for attempt in range(2):
        deadline = time.monotonic() + 300
        while graphql(url, PRICING)["runsOrError"]["results"] and time.monotonic() < deadline:
            time.sleep(5)
        diffs = []
        reports: dict[str, dict] = {}
        for unit in ("training_run", "accepted_label", "replay_hour", "released_model", "released_map",
                     "odd_cell_approval", "evidence_pack"):
            as_of = dict(shown_text(url, f"unit_cost_{unit}")).get("as_of_day")
            meta = shown(url, f"unit_cost_{unit}")
            if as_of is None:
                diffs.append(({"unit": unit, "currency": "?", "units": 0}, None, 0.0, False, "no as_of_day"))
                continue
            report = reports.setdefault(as_of, cost_report(env, as_of))
            for u in (u for u in report["unit_costs"] if u["unit"] == unit):
                cur = u["currency"]
                ui, cli = meta.get(f"cost_{cur}"), float(u["cost"] or 0)
                ok = ui is not None and abs(ui - cli) <= CENT
                if u["cost_per_unit"] is not None:
                    per = meta.get(f"cost_per_{unit}_{cur}")
                    ok = ok and per is not None and abs(per - float(u["cost_per_unit"])) <= CENT
                diffs.append((u, ui, cli, ok, f"as of {as_of}"))
        if all(d[3] for d in diffs) or attempt == 1:
            break
    units = {u["unit"] for u, *_ in diffs}
    checks.that({"released_model", "released_map"} <= units, f"cost report has unit costs of {sorted(units)}")
    for u, ui, cli, ok, when in diffs:
        checks.that(ok, f"unit_cost_{u['unit']} in the UI ({when}): {ui} {u['currency']}; cost report --day: "
                        f"{cli:.2f} over {u['units']} unit(s)")


def api_checks(url: str, checks: Checks, blocked_run: str) -> None:
    nodes = graphql(url, NODES)["assetNodes"]
    keys = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    for key in ("label_batch", "training_run", "replay", "model_evidence_pack", "released_model", "released_map",
                "gpu_queue", "chargeback", "raw_dcgm_samples"):
        checks.that(key in keys, f"asset {key} is defined")
    repos = graphql(url, INSTIGATORS)["repositoriesOrError"]["nodes"]
    states = {f"sensor {x['name']}": x["sensorState"]["status"] for r in repos for x in r["sensors"]}
    states.update({f"schedule {x['name']}": x["scheduleState"]["status"] for r in repos for x in r["schedules"]})
    off = sorted(k for k, v in states.items() if v != "RUNNING")
    checks.that(bool(states) and not off and "schedule retention_sweep_daily" in states,
                f"every schedule and sensor of the demo is on ({len(states)}; off: {off})")
    mats = graphql(url, QUEUE)["assetOrError"]["assetMaterializations"]
    checks.that(bool(mats), f"gpu_queue is materialized ({len(mats)} of the latest materializations read)")
    latest = mats[0] if mats else {"metadataEntries": []}
    labels = [e["label"] for e in latest["metadataEntries"]]
    checks.that(labels[:1] == ["waiting"], f"gpu_queue's metadata leads with the waiting table ({labels[:3]})")
    waiting = _records(latest, "waiting")
    checks.that(all(set(r) == {"request", "eta", "reason"} for r in waiting),
                f"the waiting table has three columns ({sorted(waiting[0]) if waiting else 'no rows'})")
    blank = [r.get("request") for r in waiting if not ETA.match(r.get("eta") or "")]
    checks.that(not blank, f"every waiting row has an ETA or says why not ({len(waiting)} rows; without: {blank[:3]})")
    lanes = [r["lane"] for r in _records(latest, "lanes")]
    checks.that(lanes == list(LANES), f"its lanes table has every lane in priority order ({lanes})")
    optional = ("waiting_not_shown", "break_glass_retrospectives_due")  # each only when it has something to say
    checks.that(labels[:3] == ["waiting", "lanes", "by_flavor"] and [x for x in labels[3:] if x in optional] == labels[3:],
                f"gpu_queue's materialization carries its tables only, short keys ({labels})")
    observed = graphql(url, OBSERVED)["assetOrError"]["assetObservations"]
    plotted = [e["label"] for e in (observed[0]["metadataEntries"] if observed else [])]
    for lane in LANES:
        checks.that(f"{lane}/gpus_pending" in plotted and f"{lane}/oldest_wait_s" in plotted,
                    f"gpu_queue plots {lane}/gpus_pending and {lane}/oldest_wait_s (its observations)")
    evals = graphql(url, CHECKS, {"key": {"path": ["model_evidence_pack"]}, "name": "replay_coverage"})
    failing = [e for e in evals["assetCheckExecutions"] if e["evaluation"] and not e["evaluation"]["success"]]
    blocked = [e["evaluation"] for e in failing if e["runId"] == blocked_run]
    runs = graphql(url, RUNS, {"job": "release_model_job"})["runsOrError"]["results"]
    partition = next(t["value"] for r in runs if r["runId"] == blocked_run for t in r["tags"]
                     if t["key"] == "dagster/partition")
    checks.that(bool(blocked) and "eval-night-rain-v3" in (blocked[0]["description"] or ""),
                "the blocked release's replay_coverage check names the missing suite")
    checks.that(bool(blocked) and {"label": "request_id", "text": partition} in blocked[0]["metadataEntries"],
                f"its evaluation names its partition ({partition})")
    tags = {t["key"]: t["value"] for r in runs if r["runId"] == blocked_run for t in r["tags"]}
    checks.that(tags.get("gpu-platform/blocked-by") == "model_evidence_pack.replay_coverage"
                and "eval-night-rain-v3" in tags.get("gpu-platform/blocked-missing", "")
                and "gpu-platform submit" in tags.get("gpu-platform/blocked-fix", ""),
                f"the blocked run's tags name the check, the missing suite and the fix ({tags})")
    mats = graphql(url, COST)["assetOrError"]["assetMaterializations"]
    numeric = {e["label"] for m in mats for e in m["metadataEntries"]
               if e["__typename"] in ("FloatMetadataEntry", "IntMetadataEntry")}
    checks.that(bool(mats) and "rows" in numeric and len(numeric) > 2, f"chargeback has plotted metadata {sorted(numeric)}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/ui_check.py")
    p.add_argument("--out", default=str(ROOT / "var" / "ui-check"))
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the release runs")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    home = out / "home"
    shutil.rmtree(home, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    env = {**os.environ, "GPU_PLATFORM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster_home"),
           "GPU_PLATFORM_LOCAL_GPUS": os.environ.get("DEMO_GPUS", "64")}
    for var in ("GPU_PLATFORM_LEDGER_URL", "GPU_PLATFORM_WAREHOUSE", "GPU_PLATFORM_EVIDENCE_ROOT",
                "GPU_PLATFORM_FIRST_DAY"):
        env.pop(var, None)
    cli = str(Path(sys.executable).parent / "gpu-platform")
    config, saved = ROOT / "gpu-platform.yaml", out / "gpu-platform.yaml.saved"
    if config.exists() and not saved.exists():  # a config left by an interrupted check is not the user's
        config.replace(saved)
    config.unlink(missing_ok=True)
    t0 = time.monotonic()
    checks = Checks()
    demo = None
    try:
        subprocess.run([cli, "demo", "seed", "--days", str(args.days), "--price-days", str(args.days),
                        "--project-config", str(config)], env=env, check=True, cwd=ROOT)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        demo = subprocess.Popen([cli, "demo", "run", "--port", str(port), "--incident-after", "5"], env=env,
                                cwd=ROOT)
        if not wait_for_webserver(url, timeout=300):
            raise AssertionError(f"the Dagster UI did not come up on {url}")
        print(f"ui-check: UI up {time.monotonic() - t0:.0f} s after the seed started; the researcher looks")
        browser = Browser(url, out, checks)
        try:
            researcher(browser, url, checks, timeout=420)
            preempted_run(browser, url, checks, timeout=600)
            launchpad(browser, url, checks, timeout=300)
            blocked, _passed = wait_for_releases(url, args.timeout)
            print(f"ui-check: releases ended {time.monotonic() - t0:.0f} s in; blocked run {blocked}")
            browse(browser, blocked)
            history_release(browser, url, checks)
        finally:
            browser.quit()
        api_checks(url, checks, blocked)
        runs = graphql(url, RUNS, {"job": "release_model_job"})["runsOrError"]["results"]
        partition = next(t["value"] for r in runs if r["runId"] == blocked for t in r["tags"]
                         if t["key"] == "dagster/partition")
        number_checks(url, env, [d.isoformat() for d in demo_days(args.days)], checks)
        readme_checks(checks, partition, home, out)
    except Exception as exc:  # a check that could not go on fails with what stopped it; the demo still stops
        checks.that(False, f"{type(exc).__name__}: {exc}")
    finally:
        if demo is not None:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(timeout=20)
            except subprocess.TimeoutExpired:
                demo.kill()
        config.unlink(missing_ok=True)
        if saved.exists():
            saved.replace(config)
    shots = sorted(x.name for x in out.glob("*.png"))
    print(f"ui-check: screenshots in {out}: {', '.join(shots) or 'none'}")
    if checks.failures:
        print(f"ui-check: {len(checks.failures)} check(s) failed")
        return 1
    print(f"ui-check: every check passed in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
