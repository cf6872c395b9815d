"""CLI commands `gpu-platform k8s render` and `gpu-platform dagster-config`.

`gpu_platform.cli.app` attaches them to `gpu-platform`.
The domain package must not import Dagster at import time, so `render` imports `resources.k8s`
(which uses dagster-k8s) inside the command function only.

Exit codes: 0 success, 2 invalid input (every problem is printed), 1 any other failure.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

from gpu_platform.cli.common import checked_id, fail, policy_option, policy_or_exit


@click.group()
def k8s() -> None:
    """Kubernetes: the Job a request's workload step becomes."""


@k8s.command("render")
@click.argument("request_file", type=click.Path(dir_okay=False))
@policy_option
@click.option(
    "--flavor", default=None, help="Flavor admitted for the request (default: first matching flavor)."
)
@click.option(
    "--request-id",
    default=None,
    callback=checked_id,
    help="Request id for labels (default: the file's request_id, else req-render-<content hash>).",
)
@click.option(
    "--run-id",
    default=None,
    callback=checked_id,
    help="Dagster run id the step Job belongs to (default: one derived from request id and attempt).",
)
@click.option(
    "--attempt", default=1, show_default=True, type=click.IntRange(min=1), help="Admission attempt."
)
@click.option(
    "--step",
    default=None,
    help="Step (op name) of the run to render (default: the workload step, the run's one GPU Job).",
)
@click.option(
    "--prometheus-url",
    default=None,
    help="A service's autoscaler reads its queries here (default: "
    "http://prometheus-operated.monitoring.svc:9090).",
)
def render(
    request_file: str,
    policy_path: str | None,
    flavor: str | None,
    request_id: str | None,
    run_id: str | None,
    attempt: int,
    step: str | None,
    prometheus_url: str | None,
) -> None:
    """Print the Job manifest (YAML) that k8s_job_executor would create for REQUEST_FILE; for a
    service request (`service:`), its Deployment or LeaderWorkerSet, Service and autoscaler
    (KEDA ScaledObject or HorizontalPodAutoscaler; docs/serving.md).

    Imports `resources.k8s` (dagster-k8s) lazily, so `gpu_platform` stays Dagster-free at import.
    """
    import yaml

    from gpu_platform.cluster.jobs import is_gang, resolve_flavor
    from gpu_platform.requests.model import RequestError, validate_request_file
    from resources.build import build_resources
    from resources.k8s import render_job_manifest, render_workload_manifests

    policy = policy_or_exit(policy_path)
    try:
        request = validate_request_file(request_file, policy)
    except RequestError as exc:
        fail(f"request invalid: {exc.source}", exc.errors)
    rid = request_id or request.request_id
    if rid is None:
        rid = "req-render-" + hashlib.sha256(Path(request_file).read_bytes()).hexdigest()[:12]
    request = request.model_copy(update={"request_id": rid})
    if request.service is not None:
        _render_service(request, policy, flavor, prometheus_url, step)
        return
    if step is not None:
        steps = _run_steps(request.workload)
        if step not in steps:
            fail(f"cannot render {request_file}",
                 [f"--step {step!r}: not a step of a {request.workload} run (its steps: {', '.join(steps)})"])
    try:
        # the work volume the gate mounts (GPU_PLATFORM_WORK_CLAIM at GPU_PLATFORM_WORK_ROOT), the same settings
        work_volume = build_resources()["settings"].work_volume()
        chosen = resolve_flavor(request, policy, flavor).name
        if is_gang(request) and step in (None, request.workload):
            # a multi-node request: its headless Service and Indexed Job, one Kueue Workload
            docs = render_workload_manifests(request, chosen, policy, attempt=attempt, work_volume=work_volume)
            click.echo(
                f"# Indexed Job of {request.nodes} pods x {request.gpus_per_node} GPUs and its headless rendezvous "
                f"Service for request {rid} attempt {attempt} (lane {request.lane}, team {request.team}; the gate "
                f"admitted it on {chosen}; Kueue admits all {request.nodes} pods as one Workload)"
            )
            click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
            return
        manifest = render_job_manifest(
            request, chosen, policy, step, attempt=attempt, run_id=run_id, work_volume=work_volume
        )
    except ValueError as exc:
        fail(f"cannot render {request_file}", [str(exc)])
    click.echo(
        f"# Job for request {rid} attempt {attempt}, step {step or request.workload} "
        f"(lane {request.lane}, team {request.team}; the gate admitted it on {chosen}, Kueue picks the flavor)"
    )
    click.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)


def _render_service(request, policy, flavor: str | None, prometheus_url: str | None, step: str | None) -> None:
    """Print a service's objects (`gpu_platform.cluster.services`): no run, no steps."""
    import yaml

    from gpu_platform.cluster.services import service_manifests
    from gpu_platform.serving.render import DEFAULT_PROMETHEUS_URL

    if step is not None:
        fail("cannot render a service", [f"--step {step!r}: a service runs no steps; its replicas are one Deployment"])
    try:
        docs = service_manifests(request, policy, flavor, prometheus_url or DEFAULT_PROMETHEUS_URL)
    except ValueError as exc:
        fail(f"cannot render service {request.request_id}", [str(exc)])
    spec = request.service
    workload = docs[0]
    click.echo(
        f"# {workload['kind']} {workload['metadata']['name']} of {spec.replicas.min}-{spec.replicas.max} replicas x "
        f"{request.gpu_count} {request.gpu_resource} (model {spec.model_id}; request {request.request_id}, lane "
        f"{request.lane}, team {request.team}; Kueue admits each replica through its pod integration), its Service "
        f"and its {docs[2]['kind']}"
    )
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


def _run_steps(workload: str | None) -> list[str]:
    """The step keys of the run the gate launches for this workload: the workload assets and
    their checks, read from the Dagster job itself (so a check step can be rendered too)."""
    from assets.definitions import build_definitions
    from assets.workloads import JOB_FOR_WORKLOAD

    if workload not in JOB_FOR_WORKLOAD:
        return []
    job = build_definitions().resolve_job_def(JOB_FOR_WORKLOAD[workload])
    return sorted(node.name for node in job.graph.nodes)


@click.command("dagster-config")
@policy_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write dagster.yaml here (default: print to stdout).",
)
@click.option(
    "--postgres", is_flag=True, help="Postgres storage from DAGSTER_PG_* env vars (default: SQLite)."
)
@click.option("--k8s", "use_k8s", is_flag=True, help="Add K8sRunLauncher (run pods on Kubernetes).")
@click.option("--job-namespace", default="dagster", show_default=True, help="K8sRunLauncher job_namespace.")
@click.option(
    "--service-account-name",
    default="dagster",
    show_default=True,
    help="K8sRunLauncher service_account_name.",
)
@click.option(
    "--instance-config-map",
    default="dagster-instance",
    show_default=True,
    help="ConfigMap holding this dagster.yaml, mounted into run pods.",
)
@click.option("--image-pull-policy", default="IfNotPresent", show_default=True)
def dagster_config(
    policy_path: str | None,
    out: str | None,
    postgres: bool,
    use_k8s: bool,
    job_namespace: str,
    service_account_name: str,
    instance_config_map: str,
    image_pull_policy: str,
) -> None:
    """Write the Dagster instance dagster.yaml from the policy: per-lane run limits, lane pools,
    storage (SQLite or Postgres) and, with --k8s, the K8sRunLauncher."""
    from gpu_platform.gate.instance_config import dagster_instance_yaml, render_instance_yaml

    if use_k8s and not postgres:
        fail(
            "dagster-config --k8s",
            ["--k8s needs --postgres: run pods on other nodes cannot share the webserver's SQLite storage"],
        )
    policy = policy_or_exit(policy_path)
    config = dagster_instance_yaml(
        policy,
        postgres=postgres,
        k8s=use_k8s,
        job_namespace=job_namespace,
        service_account_name=service_account_name,
        instance_config_map=instance_config_map,
        image_pull_policy=image_pull_policy,
    )
    text = render_instance_yaml(config, policy)
    if out is None:
        click.echo(text, nl=False)
        return
    from gpu_platform.safeload.files import write_file

    write_file(out, text)
    click.echo(f"wrote {out}", err=True)
