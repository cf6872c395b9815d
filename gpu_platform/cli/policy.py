"""`gpu-platform policy`: validate the policy and print its lanes and cohort tree."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from gpu_platform.cli.common import make_console, policy_or_exit, print_table

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree


@click.group("policy")
def policy() -> None:
    """Inspect and validate the GPU pool policy."""


def cohort_tree(pol) -> Tree:
    """The cohort tree with each cohort's own quota and lending limit, and the lanes under it."""
    from rich.tree import Tree

    tree = Tree("cohorts")
    nodes: dict[str, Tree] = {}

    def label(c) -> str:
        parts = [
            f"{q.flavor_name} {q.nominal_quota:g}"
            + (f" (lends ≤ {q.lending_limit:g})" if q.lending_limit is not None else "")
            for q in c.quotas
        ]
        return f"[bold]{c.name}[/bold]" + (f": {', '.join(parts)}" if parts else "")

    pending = list(pol.cohorts)
    while pending:
        rest = []
        for c in pending:
            parent = tree if c.parent_name is None else nodes.get(c.parent_name)
            if parent is None:
                rest.append(c)
                continue
            nodes[c.name] = parent.add(label(c))
        if len(rest) == len(pending):
            break
        pending = rest
    for lane in pol.lanes_by_priority():
        if lane.cohort_name in nodes:
            nodes[lane.cohort_name].add(lane.name)
    return tree


@policy.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def policy_check(file: str | None) -> None:
    """Validate FILE (default: the packaged policy) and print its lanes; exit 2 listing every error."""
    from rich.table import Table

    from gpu_platform.units import format_duration

    pol = policy_or_exit(file)
    table = Table(title=f"{len(pol.lanes)} lanes (currency {pol.currency}, budget per {pol.budget_period})")
    for col in (
        "lane",
        "priority",
        "cohort",
        "quotas (GPUs: nominal/borrow/lend)",
        "preemption",
        "evidence",
        "max runs",
        "max duration",
        "budget",
    ):
        table.add_column(col)
    for lane in pol.lanes_by_priority():
        quotas = ", ".join(
            f"{q.flavor_name} {q.nominal_quota:g}/{'∞' if q.borrowing_limit is None else f'{q.borrowing_limit:g}'}"
            f"/{'all' if q.lending_limit is None else f'{q.lending_limit:g}'}"
            for q in lane.quotas
        )
        p = lane.preemption
        pre = f"within={p.within_cluster_queue} reclaim={p.reclaim_within_cohort}"
        if lane.protected:
            pre += " protected"
        if lane.serving:
            pre += " serving" + (" lend_to_evidence" if lane.lend_to_evidence else "")
            if lane.evidence_reclaim_after is not None:
                pre += f" (reclaim after {format_duration(lane.evidence_reclaim_after)})"
        if lane.yields_to:
            pre += f" yields_to={','.join(lane.yields_to)}"
        table.add_row(
            lane.name,
            str(lane.priority),
            lane.cohort_name or "-",
            quotas,
            pre,
            "yes" if lane.evidence else "no",
            str(lane.max_concurrent_runs),
            format_duration(lane.max_run_duration),
            f"{lane.budget:,}",
        )
    console = make_console()
    print_table(console, table)
    console.print(f"flavors: {', '.join(f'{f.name} ({f.gpus} GPUs, {f.node_pool})' for f in pol.flavors)}")
    console.print(cohort_tree(pol))
    _print_team_limits_and_approvers(pol, console)
    _print_admission_checks(pol, console)
    print_table(console, scale_table(pol))


def _print_admission_checks(pol, console: Console) -> None:
    """Sites (MultiKueue worker clusters) and the ProvisioningRequest check (docs/kueue-native.md)."""
    from gpu_platform.admission.kueue_checks import lane_check_rules

    for site in pol.sites.values():
        console.print(
            f"site {site.name}: worker cluster via Secret {site.kubeconfig_secret}; flavors {', '.join(pol.site_flavors(site.name))}",
            markup=False,
            highlight=False,
        )
    for lane in pol.lanes_by_priority():
        for rule in lane_check_rules(pol, lane):
            on = f" on {', '.join(rule['onFlavors'])}" if rule.get("onFlavors") else ""
            console.print(f"admission check in {lane.name}: {rule['name']}{on}", markup=False, highlight=False)


def _print_team_limits_and_approvers(pol, console: Console) -> None:
    """Team limits per lane and the approver roster (docs/approvals.md)."""

    def cap(c) -> str:
        return ", ".join(
            f"{k}={getattr(c, k):g}" for k in ("max_gpus", "max_share", "max_running") if getattr(c, k) is not None
        )

    for lane in pol.lanes_by_priority():
        tl = lane.team_limits
        if tl is not None:
            parts = ([f"default {cap(tl.default)}"] if tl.default else []) + [
                f"{t} {cap(c)}" for t, c in sorted(tl.teams.items())
            ]
            console.print(f"team limits in {lane.name}: {'; '.join(parts)}", markup=False, highlight=False)
    for role, spec in sorted(pol.approvers.items()):
        console.print(
            f"approver role {role}: may approve {', '.join(spec.may_approve)}; members {', '.join(spec.members)}",
            markup=False,
            highlight=False,
        )


def scale_table(pol) -> Table:
    """What the policy's `scale` turns on (gpu_platform/policy/scale.py; docs/scorecards.md)."""
    from rich.table import Table

    from gpu_platform.policy.scale import describe

    table = Table(title=f"scale {pol.scale} (S0..S5)", show_header=False)
    table.add_column("what")
    table.add_column("at this scale")
    for what, value in describe(pol.scale, pol):
        table.add_row(what, value)
    return table


@policy.command("tune")
@click.option("--trace", "trace_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Job trace CSV (columns: docs/simulator.md).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), envvar="GPU_PLATFORM_POLICY", default=None,
              help="The policy to start from (default: $GPU_PLATFORM_POLICY or the packaged default.yaml).")
@click.option("--lane-from", "lane_from", default=None, help="Trace column the lane comes from (with --lane-map).")
@click.option("--lane-map", "lane_map", default=None, help="Lane map YAML, or a shipped one by name.")
@click.option("--capacity", type=float, default=None, help="Resize the pool to N GPUs (quotas scale with it).")
@click.option("--trials", type=int, default=40, show_default=True, help="Candidate policies to simulate.")
@click.option("--sample-jobs", type=int, default=4000, show_default=True,
              help="Search on the first N jobs of the trace (0: all of it).")
@click.option("--max-utilization-gap", type=float, default=0.02, show_default=True,
              help="Utilization may be at most this far below FIFO with backfill (0.02: 2 points).")
@click.option("--validate", type=click.Choice(["later", "full", "sample"]), default="later", show_default=True,
              help="Compare the input and the tuned policy with the baselines on the jobs after the sample (out of "
                   "sample), the whole trace or the sample.")
@click.option("--tune-trace", "tune_traces", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Tune on this trace's sample too (repeatable): every candidate is judged by its worst target "
                   "across the inputs.")
@click.option("--tune-capacity", type=float, default=None,
              help="Pool size for the --tune-trace inputs (default: --capacity): traces of other clusters are "
                   "tuned on at their own size.")
@click.option("--validate-trace", "validate_traces", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Also report the input and tuned policy on this held-out trace (repeatable; same lane map).")
@click.option("--validate-capacity", type=float, default=None,
              help="Pool size for the held-out traces (default: --capacity): a trace of another cluster is "
                   "judged at its own size.")
@click.option("--seed", type=int, default=0, show_default=True, help="The sampler's seed (the same seed, the same search).")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Stop searching after S seconds.")
@click.option("--checkpoint-interval", type=float, default=1800.0, show_default=True,
              help="Seconds between checkpoints of checkpoint_requeue jobs.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Write tuned-policy.yaml, policy.diff, pareto.json, pareto.png and the comparison report here.")
@click.option("--fail-on-missed", is_flag=True, help="Exit 1 when the tuned policy misses a target on validation.")
@click.option("--service", "service_path", type=click.Path(dir_okay=False), default=None,
              help="A service request (serving lane) run beside every candidate with --demand: its share of time "
                   "below need is a constraint (--serving-slo), its lane's lending_limit and lend_to_evidence knobs "
                   "(docs/serving.md).")
@click.option("--demand", "demand_spec", default=None,
              help="The service's traffic: diurnal:PEAK,TROUGH[,PERIOD_H[,PEAK_AT_H]] (qps) or a CSV timestamp,qps.")
@click.option("--serving-slo", "serving_slo", type=float, default=0.05, show_default=True,
              help="With --service: the most share of time its ready replicas may be below the demand's need.")
@click.option("--reclaim-grace", "reclaim_grace", type=float, default=None,
              help="With --service: seconds a reclaimed batch borrower takes to stop (default 30).")
def policy_tune(trace_path, policy_path, lane_from, lane_map, capacity, trials, sample_jobs, max_utilization_gap,
                validate, tune_traces, validate_traces, seed, timeout_s, checkpoint_interval, out_dir,
                fail_on_missed, validate_capacity=None, tune_capacity=None, service_path=None, demand_spec=None, serving_slo=0.05, reclaim_grace=None) -> None:
    """Search the policy's quotas, limits and preemption knobs against its lane targets on a trace."""
    import json
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpu_platform.cli.common import fail
    from gpu_platform.cli.simulate import _lane_map_path, print_table, print_targets
    from gpu_platform.policy import PolicyError, load_policy
    from gpu_platform.policy.loading import default_policy_path
    from gpu_platform.safeload import POLICY_LIMITS, InputError, load_document
    from gpu_platform.simulate import tune
    from gpu_platform.simulate.des import simulate
    from gpu_platform.simulate.html import write_trace_report
    from gpu_platform.simulate.report import lane_report
    from gpu_platform.simulate.scenarios import SCENARIOS
    from gpu_platform.simulate.targets import BASELINE, judge
    from gpu_platform.simulate.trace import TraceError, load_lane_map, load_trace

    err = make_console(stderr=True)
    problems = []
    if trials < 2:
        problems.append("--trials: must be at least 2 (the input policy and the lend-idle seed)")
    if capacity is not None and capacity <= 0:
        problems.append("--capacity: must be > 0")
    if validate_capacity is not None and validate_capacity <= 0:
        problems.append("--validate-capacity: must be > 0")
    if tune_capacity is not None and tune_capacity <= 0:
        problems.append("--tune-capacity: must be > 0")
    if sample_jobs < 0:
        problems.append("--sample-jobs: must be >= 0")
    if not 0 <= max_utilization_gap < 1:
        problems.append("--max-utilization-gap: must be in [0, 1)")
    if lane_from is not None and lane_map is None:
        problems.append("--lane-from: needs --lane-map FILE")
    if (service_path is None) != (demand_spec is None):
        problems.append("--service and --demand: give both (the service and its traffic)")
    if problems:
        fail("policy tune", problems)
    src = Path(policy_path) if policy_path else default_policy_path()
    pol = policy_or_exit(str(src))
    try:
        raw = load_document(src, POLICY_LIMITS)
    except InputError as exc:
        fail(f"policy invalid: {src}", exc.errors)
    def read(path):
        try:
            t = load_trace(path, lane_from, lm, lanes=frozenset(pol.lanes))
        except TraceError as exc:
            fail(f"trace invalid: {exc.source}", exc.errors)
        if not t.jobs:
            fail("policy tune", [f"{path}: no usable job (rows {t.rows}, quarantined {len(t.quarantined)})"])
        return t, sorted(t.jobs, key=lambda j: (j.submit_ts, j.job_id))

    try:
        lm = load_lane_map(_lane_map_path(lane_map)) if lane_map else None
    except TraceError as exc:
        fail(f"lane map invalid: {exc.source}", exc.errors)
    trace, jobs = read(trace_path)
    sample = jobs[:sample_jobs] if sample_jobs else jobs
    more_inputs = []
    for path in tune_traces:
        _t, tj = read(path)
        more_inputs.append(tune.Input(Path(path).name, tj[:sample_jobs] if sample_jobs else tj, capacity=tune_capacity))
    held_out = [(Path(path).name, read(path)[1]) for path in validate_traces]
    knobs = tune.discover(raw, {j.lane for j in sample} | {j.lane for i in more_inputs for j in i.jobs},
                          with_service=service_path is not None)
    if not knobs:
        fail("policy tune", ["the policy has no whole-GPU quota the trace's lanes could use: nothing to tune"])
    err.print(f"tuning {len(knobs)} knobs on {len(sample):,} of {len(jobs):,} jobs"
              + "".join(f" and {len(i.jobs):,} of {i.name}" for i in more_inputs)
              + f", {trials} candidates (FIFO with backfill on the sample first)")
    serving = None
    if service_path is not None:
        from gpu_platform.simulate.serving import ServingInputError, serving_target

        try:
            serving = serving_target(pol, sample, service_path, demand_spec, serving_slo, reclaim_grace_s=reclaim_grace)
        except ServingInputError as exc:
            fail(exc.source, exc.errors)
    problem = tune.Problem(raw, sample, capacity, max_utilization_gap, checkpoint_interval, inputs=more_inputs,
                           serving=serving)
    fifo_util = problem.baseline["total"]["gpu_utilization"]
    best = {"feasible": 0}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("simulating candidates", total=trials)

        def on_trial(i: int, ev: tune.Evaluation) -> None:
            best["feasible"] += ev.feasible
            util = f"invalid ({ev.error})" if ev.error else (
                f"utilization {100 * ev.utilization:.1f}%, {ev.lost_gpu_hours:,.1f} GPU-h lost, "
                + ("meets every target" if ev.feasible else f"misses by {ev.violation:.2f}"))
            bar.update(task, advance=1, description=f"candidate {i}: {util}")
            if not err.is_terminal:  # a log, not a live bar: one line per candidate
                err.print(f"candidate {i}/{trials}: {util} ({best['feasible']} so far meet every target)")

        refused: list[tune.Evaluation] = []
        evals = tune.search(problem, knobs, trials, seed=seed, timeout_s=timeout_s, on_trial=on_trial, invalid=refused)
    if not evals:
        fail("policy tune", [f"no candidate passed policy validation ({len(refused)} drawn; first error: "
                             f"{refused[0].error if refused else 'none'})"], code=1)
    chosen = tune.choose(evals)
    front = tune.pareto(evals)
    found = tune.verdict(evals, chosen, invalid=len(refused))
    if found["result"] == "infeasible":
        err.print(
            f"policy tune: no candidate of {len(evals)} met every target on the sample; binding: "
            f"{found['binding']}" + (f" on {found['binding_input']}" if found.get("binding_input") else "")
            + f" (excess {found['binding_excess']:.2f}, normalized)"
            + ("; the result is the input policy unchanged" if found["unchanged_from_input"] else "; the least-violating candidate follows")
            if found["binding"] else f"policy tune: no candidate of {len(evals)} met every target (none validated)"
        )
    from gpu_platform.safeload.files import OutputDir, write_file

    out = Path(out_dir)
    OutputDir(out).close()
    before = src.read_text(encoding="utf-8")
    after = tune.tuned_text(before, knobs, chosen.values)
    write_file(out / "tuned-policy.yaml", after)
    try:  # the file as written is what is validated and compared
        tuned_pol = load_policy(out / "tuned-policy.yaml")
    except PolicyError as exc:
        fail(f"policy tune: the tuned policy does not load ({exc.source})", exc.errors, code=1)
    write_file(out / "policy.diff", tune.diff(before, after, src.name))
    tune.write_pareto_plot(out / "pareto.png", evals, front, chosen, evals[0] if evals else None, fifo_util)

    def row(e: tune.Evaluation) -> dict:
        return {"values": e.values, "utilization": e.utilization, "lost_gpu_hours": e.lost_gpu_hours,
                "feasible": e.feasible, "violations": e.violations, "error": e.error}

    pareto_doc = {
        "sample_jobs": len(sample), "knobs": [k.name for k in knobs], "fifo_backfill_utilization": fifo_util,
        "max_utilization_gap": max_utilization_gap, "trials": [row(e) for e in evals],
        "pareto_front": [evals.index(e) for e in front], "chosen": evals.index(chosen), "verdict": found,
    }
    write_file(out / "pareto.json", json.dumps(pareto_doc, indent=1))
    # the comparison: input policy vs tuned vs the FIFO baselines, on the validation jobs
    vjobs = {"full": jobs, "sample": sample, "later": jobs[len(sample):]}[validate]
    if not vjobs:  # the sample is the whole trace: nothing after it
        err.print("no job after the sample: validating on the whole trace (not out of sample)")
        validate, vjobs = "full", jobs
    err.print(f"validating on {len(vjobs):,} jobs ({validate}): input policy, tuned policy, fifo, {BASELINE}")
    scen: dict = {}
    results: dict = {}
    for name, p, kind in (("policy", pol, "policy"), ("tuned", tuned_pol, "policy"), ("fifo", pol, "fifo"),
                          (BASELINE, pol, BASELINE)):
        res = simulate(SCENARIOS[kind](p, capacity), vjobs, checkpoint_interval_s=checkpoint_interval)
        results[name] = res
        scen[name] = lane_report(res)
    scen["tuned"]["description"] = "the tuned policy (" + scen["tuned"]["description"] + ")"
    targets_in = judge(pol, scen)
    targets_tuned = judge(tuned_pol, {"policy": scen["tuned"], BASELINE: scen[BASELINE]})
    gap_points = 100 * ((scen[BASELINE]["total"]["gpu_utilization"] or 0) - (scen["tuned"]["total"]["gpu_utilization"] or 0))
    doc = {
        "trace": trace.summary(), "capacity_gpus": scen["policy"]["capacity_gpus"], "validated_on": validate,
        "checkpoint_interval_s": checkpoint_interval, "tick_s": 0.0, "scenarios": scen, "targets": targets_tuned,
        "targets_input_policy": targets_in,
        "utilization_gap_points": round(gap_points, 2), "max_utilization_gap_points": 100 * max_utilization_gap,
        "search": {k: v for k, v in pareto_doc.items() if k != "trials"},
    }
    held: dict = {}
    for name, hjobs in held_out:  # traces the search never saw: the tuned policy's out-of-sample figures
        hcap = capacity if validate_capacity is None else validate_capacity
        rep = {k: lane_report(simulate(SCENARIOS[kind](p, hcap), hjobs, checkpoint_interval_s=checkpoint_interval))
               for k, p, kind in (("policy", pol, "policy"), ("tuned", tuned_pol, "policy"), (BASELINE, pol, BASELINE))}
        t_in = judge(pol, {"policy": rep["policy"], BASELINE: rep[BASELINE]})
        t_tuned = judge(tuned_pol, {"policy": rep["tuned"], BASELINE: rep[BASELINE]})
        util = {k: rep[k]["total"]["gpu_utilization"] or 0.0 for k in rep}
        held[name] = {
            "jobs": len(hjobs), "capacity_gpus": rep["policy"]["capacity_gpus"], "utilization": util,
            "utilization_gap_points": round(100 * (util[BASELINE] - util["tuned"]), 2),
            "targets_met": t_tuned["met"], "targets_missed": t_tuned["missed"],
            "missed": [f"{lane}.{r['target']}" for lane, rows in t_tuned["lanes"].items() for r in rows if r["met"] is False],
            "input_policy_targets_met": t_in["met"], "input_policy_targets_missed": t_in["missed"],
            "wait_p95_s": {k: {lane: r["wait_s"]["p95"] for lane, r in rep[k]["lanes"].items()} for k in rep},
        }
        err.print(f"held out {name} ({len(hjobs):,} jobs): tuned {100 * util['tuned']:.1f}% (input "
                  f"{100 * util['policy']:.1f}%, {BASELINE} {100 * util[BASELINE]:.1f}%), targets met "
                  f"{t_tuned['met']}, missed {t_tuned['missed']} (input policy: met {t_in['met']}, missed {t_in['missed']})")
    doc["held_out"] = held
    write_trace_report(out, doc, results)
    print_table(doc, err)
    err.print("tuned policy:")
    print_targets(targets_tuned, err)
    err.print(f"utilization: tuned {100 * (scen['tuned']['total']['gpu_utilization'] or 0):.1f}%, {BASELINE} "
              f"{100 * (scen[BASELINE]['total']['gpu_utilization'] or 0):.1f}% ({gap_points:.1f} points below; "
              f"allowed {100 * max_utilization_gap:.1f})")
    err.print(f"wrote tuned-policy.yaml, policy.diff, pareto.json, pareto.png, report.html to {out}")
    click.echo(json.dumps({"tuned_policy": str(out / "tuned-policy.yaml"), "targets_met": targets_tuned["met"],
                           "targets_missed": targets_tuned["missed"], "utilization_gap_points": round(gap_points, 2),
                           "candidates": len(evals), "feasible_on_sample": sum(e.feasible for e in evals),
                           "validated_on": validate, "validation_jobs": len(vjobs), "held_out": {
                               n: {k: h[k] for k in ("jobs", "capacity_gpus", "utilization_gap_points", "targets_met",
                                                     "targets_missed", "missed")}
                               for n, h in held.items()},
                           "verdict": found}, indent=1))
    missed = targets_tuned["missed"] or gap_points > 100 * max_utilization_gap + 1e-9
    if fail_on_missed and missed:
        sys.exit(1)
