"""`gpu-platform simulate`: replay a job trace (or a Kueue generator file) through the admission
engine under the policy and the baselines; JSON on stdout, the lane table on stderr, and with
`--out DIR` report.json, report.html and PNG plots."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import fail, make_console, policy_option, policy_or_exit
from gpu_platform.cli.common import print_table as print_fitted

if TYPE_CHECKING:
    from rich.console import Console

LANE_MAPS = Path(__file__).parents[1] / "simulate" / "lane_maps"


def _lane_map_path(value: str) -> Path:
    """A file path, or the name of a shipped map (`elasticflow`)."""
    p = Path(value)
    if p.exists():
        return p
    shipped = LANE_MAPS / f"{value}.yaml"
    return shipped if shipped.exists() else p


def _h(v: float | None) -> str:
    return "-" if v is None else f"{v / 3600:.2f}"


def print_serving(section: dict, console: Console) -> None:
    """The service's SLO and batch utilization with and without lending (`simulate --service`)."""
    from rich.table import Table

    from gpu_platform.simulate.serving import serving_rows

    t = Table(title=f"service {section['service']['name']} ({section['service']['lane']}) beside the trace")
    for col in ("figure", "with lending", "without lending"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for row in serving_rows(section):
        t.add_row(*row)
    print_fitted(console, t)


def print_table(doc: dict, console: Console) -> None:
    from rich.table import Table

    for name, rep in doc["scenarios"].items():
        nodes = rep.get("node_model")
        t = Table(
            title=f"{name}: {rep['description']} ({rep['capacity_gpus']:g} GPUs"
            + (f" on {nodes['nodes']} nodes" if nodes else "")
            + f", {rep['horizon_s'] / 86400:.1f} days)"
        )
        for col in (
            "lane",
            "jobs",
            "never admitted",
            "wait p50 h",
            "wait p95 h",
            "wait max h",
            "GPU util",
            "useful util",
            "GPU-h lost",
            "preemptions",
            "GPU-h stranded",
        ):
            t.add_column(col, justify="left" if col == "lane" else "right")
        for lane, f in list(rep["lanes"].items()) + [("all", rep["total"])]:
            w = f["wait_s"]
            util = "-" if f["gpu_utilization"] is None else f"{100 * f['gpu_utilization']:.1f}%"
            useful = f.get("useful_gpu_utilization")
            t.add_row(
                lane,
                str(f["jobs"]),
                str(f["never_admitted"]),
                _h(w["p50"]),
                _h(w["p95"]),
                _h(w["max"]),
                util,
                "-" if useful is None else f"{100 * useful:.1f}%",
                f"{f['gpu_hours_lost_to_preemption']:.1f}",
                str(f["preemptions"]),
                "-" if f.get("gpu_hours_stranded_by_fragmentation") is None else f"{f['gpu_hours_stranded_by_fragmentation']:.1f}",
            )
        print_fitted(console, t)
        idle = rep["total"].get("gpu_hours_idle_by_lending_rule")
        if idle:
            console.print(
                f"{name}: the serving lane's lending rule kept {idle:,.1f} GPU-h of its idle quota idle while "
                "a waiting head it withholds them from (uncheckpointed evidence, protected work) would have "
                "fit (total.gpu_hours_idle_by_lending_rule; a serving lane's lend_to_evidence: true lends them to "
                "evidence runs too: docs/serving.md)"
            )
        big = rep["total"].get("never_fits") or {}
        if big.get("jobs"):
            first = big["listed"][0]
            console.print(
                f"{name}: {big['jobs']} job(s) no flavor they may use can ever hold (up to "
                f"{big['gpus_needed_max']:g} GPUs on one flavor; e.g. {first['job_id']}: {first['reason']}); "
                "listed in the JSON under total.never_fits"
            )


def print_targets(targets: dict, console: Console) -> None:
    from rich.table import Table

    from gpu_platform.simulate.targets import shown

    if not targets["lanes"]:
        return
    t = Table(title=f"lane targets: {targets['met']} met, {targets['missed']} missed, {targets['not_judged']} not judged")
    for col in ("lane", "target", "limit", "policy", "verdict"):
        t.add_column(col)
    for lane, rows in targets["lanes"].items():
        for r in rows:
            t.add_row(lane, r["target"], *shown(r))
    print_fitted(console, t)


@click.command("simulate")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Job trace CSV (columns: docs/simulator.md).",
)
@click.option(
    "--generator",
    "generator_path",
    type=click.Path(exists=True, dir_okay=False),
    help="A Kueue scheduler-performance generator file to replay instead of a trace.",
)
@policy_option
@click.option(
    "--compare",
    default="fifo,fifo-backfill,fifo-flavors,fifo-flavors-backfill,strict",
    show_default=True,
    help="Baselines to run beside the policy: fifo, fifo-backfill (one pool), fifo-flavors, "
    "fifo-flavors-backfill (the policy's flavors and nodes), strict (comma-separated; 'none').",
)
@click.option(
    "--capacity", type=float, default=None, help="Resize the pool to N GPUs (quotas scale with it)."
)
@click.option(
    "--lane-from", "lane_from", default=None, help="Trace column the lane comes from (with --lane-map)."
)
@click.option(
    "--lane-map", "lane_map", default=None, help="Lane map YAML, or a shipped one by name: elasticflow."
)
@click.option(
    "--checkpoint-interval",
    type=float,
    default=1800.0,
    show_default=True,
    help="Seconds between checkpoints of checkpoint_requeue jobs.",
)
@click.option(
    "--tick",
    type=float,
    default=0.0,
    show_default=True,
    help="Run admission every N seconds (the gate's interval); 0: at every event.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write report.json, report.html and PNG plots here.",
)
@click.option(
    "--node-gpus",
    type=float,
    default=None,
    help="Place every flavor's GPUs on nodes of N GPUs: jobs over one node are gangs needing whole free nodes.",
)
@click.option(
    "--node-model",
    type=click.Choice(["policy"]),
    default=None,
    help="Place GPUs on the policy's node shapes (resized with --capacity); default: quota only.",
)
@click.option(
    "--gang-split",
    type=click.Choice(["smallest", "largest"]),
    default="smallest",
    show_default=True,
    help="With nodes: a job over one node becomes pods of the smallest node size among the flavors it may use "
    "(fits any of them) or of the largest (whole nodes of the largest shape); the baselines split it the same way.",
)
@click.option(
    "--service",
    "service_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A service request (serving lane) whose replicas follow --demand beside the trace: serving SLO and batch "
    "utilization with and without lending (docs/serving.md, Simulating traffic).",
)
@click.option(
    "--demand",
    "demand_spec",
    default=None,
    help="The service's traffic: diurnal:PEAK,TROUGH[,PERIOD_H[,PEAK_AT_H]] (qps) or a CSV timestamp,qps.",
)
@click.option(
    "--reclaim-grace",
    type=float,
    default=None,
    help="Seconds a reclaimed batch borrower takes to stop (its terminationGracePeriodSeconds; default 30).",
)
@click.option("--quiet", is_flag=True, help="No lane table on stderr.")
@click.option(
    "--fail-on-missed",
    is_flag=True,
    help="Exit 1 when a lane target of the policy (lanes.<lane>.targets) is missed.",
)
def simulate_cmd(
    trace_path: str | None,
    generator_path: str | None,
    policy_path: str | None,
    compare: str,
    capacity: float | None,
    lane_from: str | None,
    lane_map: str | None,
    checkpoint_interval: float,
    tick: float,
    out_dir: str | None,
    node_gpus: float | None,
    node_model: str | None,
    gang_split: str,
    service_path: str | None,
    demand_spec: str | None,
    reclaim_grace: float | None,
    quiet: bool,
    fail_on_missed: bool,
) -> None:
    """Replay a job trace through the admission engine: per-lane waits, utilization, lost work."""
    from gpu_platform.simulate.des import simulate
    from gpu_platform.simulate.report import lane_report
    from gpu_platform.simulate.scenarios import SCENARIOS, policy_node_gpus, uniform_node_gpus, with_nodes
    from gpu_platform.simulate.targets import judge
    from gpu_platform.simulate.trace import SortedTrace, TraceError, load_lane_map

    err = make_console(stderr=True)
    if (trace_path is None) == (generator_path is None):
        fail("simulate", ["give exactly one of --trace CSV or --generator FILE"])
    if generator_path is not None:
        from gpu_platform.simulate.kueue_scenario import kueue_report, run_generator

        t0 = time.perf_counter()
        try:
            ks, res = run_generator(generator_path, tick=tick)
        except TraceError as exc:
            fail(f"generator invalid: {exc.source}", exc.errors)
        doc = kueue_report(ks, res)
        doc["simulation_wall_s"] = round(time.perf_counter() - t0, 3)
        click.echo(json.dumps(doc, indent=1))
        if out_dir:
            from gpu_platform.simulate.html import write_kueue_report

            files = write_kueue_report(Path(out_dir), doc)
            err.print(f"wrote {', '.join(files)} to {out_dir}")
        return
    pol = policy_or_exit(policy_path)
    names = ["policy"] + [n.strip() for n in compare.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in SCENARIOS]
    known = ", ".join(n for n in SCENARIOS if n != "policy")
    problems = [f"--compare: unknown baseline {n!r} ({known})" for n in unknown]
    if capacity is not None and capacity <= 0:
        problems.append("--capacity: must be > 0")
    if lane_from is not None and lane_map is None:
        problems.append("--lane-from: needs --lane-map FILE")
    if node_gpus is not None and node_model is not None:
        problems.append("--node-gpus and --node-model: give one of them")
    if node_gpus is not None and node_gpus <= 0:
        problems.append("--node-gpus: must be > 0")
    if node_model == "policy" and not policy_node_gpus(pol):
        problems.append("--node-model policy: the policy declares no node shapes (autoscaling.node_pools.<pool>.node_gpus)")
    if gang_split != "smallest" and node_gpus is None and node_model is None:
        problems.append("--gang-split: only with --node-gpus or --node-model (gangs exist on nodes only)")
    if (service_path is None) != (demand_spec is None):
        problems.append("--service and --demand: give both (the service and its traffic)")
    if problems:
        fail("simulate", problems)
    try:
        lm = load_lane_map(_lane_map_path(lane_map)) if lane_map else None
        # read once, sorted in bounded runs on disk, and streamed to each scenario: memory holds
        # the queued and running jobs and the report's aggregates, not the trace (docs/simulator.md)
        trace = SortedTrace(trace_path, lane_from, lm, lanes=frozenset(pol.lanes), sites=frozenset(pol.sites),  # type: ignore[arg-type]
                            progress=lambda rows: err.print(f"reading {trace_path}: {rows:,} rows"))
    except TraceError as exc:
        fail(f"trace invalid: {exc.source}", exc.errors)
    if trace.quarantined:
        err.print(
            f"{trace.quarantined_count} of {trace.rows} row(s) quarantined, e.g. line {trace.quarantined[0].line}: {trace.quarantined[0].reason}"
        )
    doc: dict = {
        "trace": trace.summary(),
        "lane_map": None if lm is None else {"source": lm.source, "column": lane_from or lm.column},
        "capacity_gpus": capacity,
        "checkpoint_interval_s": checkpoint_interval,
        "tick_s": tick,
        "node_model": node_model or (None if node_gpus is None else f"{node_gpus:g} GPUs per node"),
        "gang_split": None if node_model is None and node_gpus is None else gang_split,
        "scenarios": {},
    }
    results = {}
    for name in dict.fromkeys(names):
        t0 = time.perf_counter()
        scn = SCENARIOS[name](pol, capacity)
        if node_model == "policy":
            scn = with_nodes(scn, policy_node_gpus(pol), gang_split)
        elif node_gpus is not None:
            scn = with_nodes(scn, uniform_node_gpus(scn.base, node_gpus), gang_split)
        res = simulate(scn, trace, tick=tick, checkpoint_interval_s=checkpoint_interval, keep_runs=False,
                       progress=lambda done, n, name=name: err.print(f"simulating {name}: {done:,} of {n:,} jobs arrived"))
        rep = lane_report(res)
        rep["simulation_wall_s"] = round(time.perf_counter() - t0, 3)
        doc["scenarios"][name] = rep
        res.outcome = None  # reported: the plots need only the (bucketed) usage events
        results[name] = res
    doc["capacity_gpus"] = doc["scenarios"]["policy"]["capacity_gpus"]
    doc["targets"] = judge(pol, doc["scenarios"])
    if service_path is not None and demand_spec is not None:
        from gpu_platform.simulate.serving import ServingInputError, serving_section

        scn = SCENARIOS["policy"](pol, capacity)
        try:
            doc["serving"] = serving_section(
                pol, scn, list(trace), service_path, demand_spec, reclaim_grace_s=reclaim_grace,
                tick=tick, checkpoint_interval_s=checkpoint_interval,
            )
        except ServingInputError as exc:
            fail(exc.source, exc.errors)
    click.echo(json.dumps(doc, indent=1))
    if not quiet:
        print_table(doc, err)
        print_targets(doc["targets"], err)
        if "serving" in doc:
            print_serving(doc["serving"], err)
    if out_dir:
        from gpu_platform.simulate.html import write_trace_report

        files = write_trace_report(Path(out_dir), doc, results)
        err.print(f"wrote {', '.join(files)} to {out_dir}")
    trace.close()
    if fail_on_missed and doc["targets"]["missed"]:
        missed = [f"{lane} {r['target']}" for lane, rows in doc["targets"]["lanes"].items() for r in rows if r["met"] is False]
        click.echo(f"simulate: {len(missed)} lane target(s) missed: {', '.join(missed)}", err=True)
        sys.exit(1)
