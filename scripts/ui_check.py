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

and asserts what each page says (asset names, lanes, the check that blocked the release), and
through GraphQL that every lane is observed on `gpu_queue`, the workload and cost assets exist, the
blocked release's check names what is missing, its run's tags name the check, the suite and the fix,
and the cost asset has plotted (numeric) metadata; and that the numbers
the UI shows equal `gpu-platform cost report --format json` to the cent: each seeded day's chargeback
and billed totals (that partition's own metadata) and every lifetime unit cost, released model and
map included. Stops the demo
(the supervisor stops the whole process tree) whatever happens. Exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_platform.demo.costs import demo_days  # noqa: E402
from gpu_platform.demo.supervisor import graphql, wait_for_webserver  # noqa: E402

LANES = ("incident_response", "release_eval", "map_semantic_batch", "candidate_train", "platform_maintenance",
         "labeler_batch", "baseline_rebuild", "research_best_effort")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
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
QUEUE = """{ assetOrError(assetKey: {path: ["gpu_queue"]}) { ... on Asset { assetObservations(limit: 50) {
  metadataEntries { label } } } } }"""
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


def browse(url: str, out: Path, blocked_run: str, checks: Checks) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage", "--window-size=1600,1400"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        pages = [
            ("01-asset-graph.png", "/asset-groups", (), ("admission", "workloads", "finops_raw", "finops")),
            ("02-workloads-lineage.png", "/locations/gpu_platform/asset-groups/workloads/lineage", (),
             ("label_batch", "training_run", "model_evidence_pack", "released_model", "released_map")),
            ("03-gpu-queue-plots.png", "/assets/gpu_queue", ("Plots",),
             ("research_best_effort/pending", "incident_response/gpus_in_use")),
            ("04-blocked-release-run.png", f"/runs/{blocked_run}", (),
             ("model_evidence_pack_replay_coverage", "blocked by model_evidence_pack.replay_coverage")),
            ("05-chargeback-plots.png", "/assets/chargeback", ("Plots",), ("total_cost_USD", "gpu_hours")),
        ]
        for name, path, clicks, needles in pages:
            driver.get(url + path)
            time.sleep(4)
            dismiss(driver)
            for label in clicks:
                try:
                    button = WebDriverWait(driver, 30).until(lambda d, t=label: _button(d, t))
                    button.click()
                    if label == "Plots":  # the plots are below the fold: bring them up
                        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", button)
                except Exception:
                    checks.that(False, f"{path}: no {label!r} button")
            try:
                WebDriverWait(driver, 30).until(
                    lambda d, n=needles: all(x in _page_text(d) for x in n))
            except Exception:  # the screenshot shows what was there instead
                pass
            time.sleep(3)  # let plots and the graph layout settle
            driver.save_screenshot(str(out / name))
            text = _page_text(driver)
            for needle in needles:
                checks.that(needle in text, f"{path} shows {needle!r} ({name})")
    finally:
        driver.quit()


LATEST = """query Latest($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(partitions: $p, limit: 1) { partition metadataEntries { label
  ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue } } } } } }"""
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


def cost_report(env: dict[str, str], day: str) -> dict:
    cli = str(Path(sys.executable).parent / "gpu-platform")
    out = subprocess.run([cli, "cost", "report", "--day", day, "--format", "json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def number_checks(url: str, env: dict[str, str], days: list[str], checks: Checks) -> None:
    """What the UI shows equals `cost report --format json`, to the cent: each seeded day's
    chargeback and billed totals (its own partition's metadata) and every lifetime unit cost."""
    for day in days:
        report = cost_report(env, day)
        charge, recon = shown(url, "chargeback", day), shown(url, "reconciliation", day)
        for t in report["totals"]:
            cur = t["currency"]
            ui, cli = charge.get(f"total_cost_{cur}"), float(t["chargeback_total"])
            checks.that(ui is not None and abs(ui - cli) <= CENT,
                        f"chargeback {day} in the UI: {ui} {cur}; cost report: {cli:.2f}")
            ui, cli = recon.get(f"billed_cost_{cur}"), float(t["billed"])
            checks.that(ui is not None and abs(ui - cli) <= CENT,
                        f"reconciliation {day} billed in the UI: {ui} {cur}; cost report: {cli:.2f}")
    # unit costs are lifetime: today's pricing changes them, so compare when none is in flight,
    # and once more if a run slipped in between the two reads
    for attempt in range(2):
        deadline = time.monotonic() + 300
        while graphql(url, PRICING)["runsOrError"]["results"] and time.monotonic() < deadline:
            time.sleep(5)
        report = cost_report(env, days[-1])
        diffs = []
        for u in report["unit_costs"]:
            meta = shown(url, f"unit_cost_{u['unit']}")
            ui, cli = meta.get(f"lifetime_cost_{u['currency']}"), float(u["cost"] or 0)
            diffs.append((u, ui, cli, ui is not None and abs(ui - cli) <= CENT))
        if all(ok for *_, ok in diffs) or attempt == 1:
            break
    units = {u["unit"] for u, *_ in diffs}
    checks.that({"released_model", "released_map"} <= units, f"cost report has unit costs of {sorted(units)}")
    for u, ui, cli, ok in diffs:
        checks.that(ok, f"unit_cost_{u['unit']} in the UI: lifetime {ui} {u['currency']}; cost report: {cli:.2f} "
                        f"over {u['units']} unit(s)")


def api_checks(url: str, checks: Checks, blocked_run: str) -> None:
    nodes = graphql(url, NODES)["assetNodes"]
    keys = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    for key in ("label_batch", "training_run", "replay", "model_evidence_pack", "released_model", "released_map",
                "gpu_queue", "chargeback", "raw_dcgm_samples"):
        checks.that(key in keys, f"asset {key} is defined")
    observed = {e["label"] for o in graphql(url, QUEUE)["assetOrError"]["assetObservations"]
                for e in o["metadataEntries"]}
    for lane in LANES:
        checks.that(f"{lane}/pending" in observed, f"gpu_queue observes {lane}/pending")
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
    t0 = time.monotonic()
    subprocess.run([cli, "demo", "seed", "--days", str(args.days), "--price-days", str(args.days)], env=env,
                   check=True, cwd=ROOT)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen([cli, "demo", "run", "--port", str(port), "--incident-after", "5"], env=env, cwd=ROOT)
    checks = Checks()
    try:
        if not wait_for_webserver(url, timeout=300):
            raise AssertionError(f"the Dagster UI did not come up on {url}")
        print(f"ui-check: UI up {time.monotonic() - t0:.0f} s after the seed started; waiting for the releases")
        blocked, _passed = wait_for_releases(url, args.timeout)
        print(f"ui-check: releases ended {time.monotonic() - t0:.0f} s in; blocked run {blocked}")
        browse(url, out, blocked, checks)
        api_checks(url, checks, blocked)
        number_checks(url, env, [d.isoformat() for d in demo_days(args.days)], checks)
    except AssertionError as exc:
        checks.that(False, str(exc))
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=20)
        except subprocess.TimeoutExpired:
            demo.kill()
    shots = sorted(x.name for x in out.glob("*.png"))
    print(f"ui-check: screenshots in {out}: {', '.join(shots) or 'none'}")
    if checks.failures:
        print(f"ui-check: {len(checks.failures)} check(s) failed")
        return 1
    print(f"ui-check: every check passed in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
