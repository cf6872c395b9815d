"""Click commands for the admission engine.

`gpu-platform admit --cases FILE` runs a case file (contract: tests/fixtures/admission/README.md)
and prints one JSON object per case; it exits 1 when any case's expectation is not met.
`gpu-platform kueue export [--policy FILE] --out DIR` writes the policy as Kueue manifests.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click

from gpu_platform.cli.common import fail


def _cases(path: str) -> list[dict]:
    """The file's `cases`, read within CASES_LIMITS (exit 2 listing the problems otherwise)."""
    from gpu_platform.safeload import CASES_LIMITS, InputError, load_document

    try:
        raw = load_document(path, CASES_LIMITS)
    except InputError as exc:
        fail(f"cases invalid: {exc.source}", exc.errors)
    if raw is None:
        return []
    if not isinstance(raw, dict) or not isinstance(raw.get("cases") or [], list):
        fail(f"cases invalid: {path}", ["<root>: expected a mapping with a `cases` list"])
    return [c for c in raw.get("cases") or []]


@click.command("admit")
@click.option(
    "--cases",
    "case_files",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Admission case file (YAML); repeat for several.",
)
@click.option("--only", default=None, help="Run only the case with this id.")
@click.option("--summary/--no-summary", default=False, help="Print a table of results to stderr.")
def admit(case_files: tuple[str, ...], only: str | None, summary: bool) -> None:
    """Run admission cases and check their expectations."""
    from gpu_platform.admission.cases import run_case

    failed = 0
    rows = []
    for path in case_files:
        for case in _cases(path):
            if only is not None and case.get("id") != only:
                continue
            outcome = run_case(case)
            click.echo(json.dumps(outcome.output, sort_keys=False))
            if not outcome.ok:
                failed += 1
                for f in outcome.failures:
                    click.echo(f"FAIL {outcome.id}: {f}", err=True)
            rows.append((path, outcome.id, "ok" if outcome.ok else "FAIL"))
    if summary:
        from rich.table import Table

        from gpu_platform.cli.common import make_console, print_table

        table = Table(title="admission cases")
        for col in ("file", "case", "result"):
            table.add_column(col)
        for r in rows:
            table.add_row(*r)
        print_table(make_console(stderr=True), table)
    if not rows:
        raise click.ClickException("no cases matched")
    if failed:
        click.echo(f"{failed} of {len(rows)} case(s) failed", err=True)
        sys.exit(1)
    click.echo(f"{len(rows)} case(s) passed", err=True)


@click.group("kueue")
def kueue() -> None:
    """Kueue manifests generated from the policy."""


@kueue.command("export")
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Policy file (default: the packaged default policy).",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory to write into."
)
def export(policy_file: str | None, out_dir: str) -> None:
    """Write Topology, ResourceFlavor, Cohort, ClusterQueue, LocalQueue and WorkloadPriorityClass manifests,
    plus AdmissionCheck, ProvisioningRequestConfig, MultiKueueCluster and MultiKueueConfig when the
    policy has `autoscaling.provisioning` or `sites:` (docs/kueue-native.md)."""
    import yaml

    from gpu_platform.admission.kueue_export import kueue_configuration, write_manifests
    from gpu_platform.cli.common import policy_or_exit

    policy = policy_or_exit(policy_file)
    paths = write_manifests(policy, out_dir)
    kinds = Counter(p.name.split("-", 1)[0] for p in paths)
    click.echo(
        f"wrote {len(paths)} manifests to {out_dir} ("
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + ")"
    )
    config = kueue_configuration(policy)
    if config is not None:
        # Not an object to apply: a block to merge into Kueue's manager Configuration. A
        # subfolder, so `kubectl apply -f DIR` (not recursive) leaves it alone.
        path = Path(out_dir) / "kueue-manager-config" / "admission-fair-sharing.yaml"
        from gpu_platform.safeload.files import write_file

        write_file(path, yaml.safe_dump(config, sort_keys=False))
        click.echo(
            f"wrote {path}: merge its admissionFairSharing block into Kueue's Configuration "
            "(ConfigMap kueue-manager-config) and restart Kueue"
        )
    from gpu_platform.serving.render import kueue_integrations

    integrations = kueue_integrations(policy)
    if integrations is not None:
        from gpu_platform.safeload.files import write_file

        path = Path(out_dir) / "kueue-manager-config" / "integrations.yaml"
        write_file(path, yaml.safe_dump(integrations, sort_keys=False))
        click.echo(
            f"wrote {path}: a serving lane's Deployments and LeaderWorkerSets need these integrations in "
            "Kueue's Configuration (ConfigMap kueue-manager-config; keep any you already list) and a Kueue restart"
        )
