"""`gpu-platform policy`: validate the policy and print its lanes and cohort tree."""

from __future__ import annotations

import click
from rich.table import Table
from rich.tree import Tree

from gpu_platform.cli.common import console, policy_or_exit
from gpu_platform.policy.scale import describe
from gpu_platform.units import format_duration


@click.group("policy")
def policy() -> None:
    """Inspect and validate the GPU pool policy."""


def cohort_tree(pol) -> Tree:
    """The cohort tree with each cohort's own quota and lending limit, and the lanes under it."""
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
    console.print(table)
    console.print(f"flavors: {', '.join(f'{f.name} ({f.gpus} GPUs, {f.node_pool})' for f in pol.flavors)}")
    console.print(cohort_tree(pol))
    _print_team_limits_and_approvers(pol)
    _print_admission_checks(pol)
    console.print(scale_table(pol))


def _print_admission_checks(pol) -> None:
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


def _print_team_limits_and_approvers(pol) -> None:
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
    table = Table(title=f"scale {pol.scale} (S0..S5)", show_header=False)
    table.add_column("what")
    table.add_column("at this scale")
    for what, value in describe(pol.scale, pol):
        table.add_row(what, value)
    return table
