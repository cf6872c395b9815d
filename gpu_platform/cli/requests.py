"""`gpu-platform request validate` and `gpu-platform submit`."""

from __future__ import annotations

import sys

import click

from gpu_platform.cli.common import (
    console,
    deferred,
    err_console,
    ledger_option,
    policy_option,
    policy_or_exit,
)

# imported on first use, so `request --help` and `submit --help` import neither SQLAlchemy nor
# the request model (issue 40); module names still, as the command bodies use them
(sa,) = deferred(globals(), "sqlalchemy")
BatchConflict, Ledger, content_request_id, default_ledger_url = deferred(
    globals(), "gpu_platform.requests.ledger", "BatchConflict", "Ledger", "content_request_id", "default_ledger_url"
)
RequestError, local_inventory_problems, request_warnings, validate_request_file = deferred(
    globals(), "gpu_platform.requests.model",
    "RequestError", "local_inventory_problems", "request_warnings", "validate_request_file",
)


def caller_identity():
    """Who runs `submit` (`identity.current_identity`; the Kubernetes user via SelfSubjectReview
    when GPU_PLATFORM_IDENTITY=kubernetes)."""
    from gpu_platform.cli import approve
    from gpu_platform.requests.identity import current_identity

    return current_identity(kubernetes_user=approve._kubernetes_user)


def deployed_policy_path_is_default(ledger_url: str | None) -> bool:
    """Whether the deployed policy is the one `policy_or_exit(None)` already loaded (no reload)."""
    import os

    from gpu_platform.cli.project import deployed_policy_path

    return deployed_policy_path(ledger_url) == (os.environ.get("GPU_PLATFORM_POLICY") or None)


def _local_inventory() -> tuple[int, str] | None:
    """(GPUs, where from) of this machine when the platform runs here (the local executor) and
    knows its GPUs (NVML, or `GPU_PLATFORM_LOCAL_GPUS`); None otherwise: nothing to check against.
    Read through `build_resources`, the one place that reads the environment (imported lazily:
    it brings in Dagster)."""
    from gpu_platform.devices.gpus import InventoryError
    from resources.build import build_resources

    try:
        res = build_resources()
        if res["settings"].executor != "local":
            return None
        inv = res["executor"].inventory()
    except (InventoryError, ValueError):
        return None
    if inv.source == "configured" and not inv.devices:
        return None
    return len(inv.devices), inv.detail


def _validate_here(path: str, pol, local: tuple[int, str] | None):
    """`validate_request_file`, plus the local executor's inventory when it applies."""
    req = validate_request_file(path, pol)
    if local is not None:
        problems = local_inventory_problems(req, *local)
        if problems:
            raise RequestError(problems, path)
    return req


@click.group("request")
def request() -> None:
    """Validate job requests."""


@request.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@policy_option
def request_validate(files: tuple[str, ...], policy_path: str | None) -> None:
    """Validate request FILES (YAML or JSON); exit 2 listing every problem with its field path.

    Where the platform runs on this machine (the local executor) and knows its GPUs, a request
    for more whole GPUs than it has is refused too."""
    pol = policy_or_exit(policy_path)
    failed = 0
    local = _local_inventory()
    for f in files:
        try:
            req = _validate_here(f, pol, local)
        except RequestError as exc:
            failed += 1
            err_console.print(f"[bold red]invalid[/] {f}: {len(exc.errors)} problem(s)", soft_wrap=True)
            for e in exc.errors:
                err_console.print(f"  {e}", markup=False, highlight=False, soft_wrap=True)
            continue
        console.print(
            f"[green]ok[/] {f}: lane {req.lane}, {req.gpu_count} x {req.gpu_type}"
            + (f" ({req.nodes} nodes x {req.gpus_per_node} GPUs)" if req.nodes and req.nodes > 1 else "")
            + f", workload {req.workload}"
            + (
                f" ({req.service.replicas.min}-{req.service.replicas.max} replicas of model {req.service.model_id}, "
                f"autoscaler {req.service.autoscaler})"
                if req.service is not None
                else ""
            )
        )
        _warn(f, req)
    if failed:
        sys.exit(2)


def _warn(source: str, req) -> None:
    for w in request_warnings(req):
        err_console.print(f"warning {source}: {w}", markup=False, highlight=False, soft_wrap=True)


@click.command("submit")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@policy_option
@ledger_option
@click.option("--again", is_flag=True,
              help="Record a file whose identical request already ended (finished, failed, rejected) as a new "
                   "run (<id>-run<n>); a live one is still answered with its id.")
def submit(files: tuple[str, ...], policy_path: str | None, ledger_url: str | None, again: bool) -> None:
    """Validate and record requests in the ledger; print each request id.

    Every file is validated first; then all are recorded in one transaction, or none (exit 2
    listing every problem, or naming the file whose request_id exists with other content).
    A file without `request_id` gets a content-derived id, so re-running a batch never
    records a request twice: one whose identical request is still live is "already recorded"
    under that id. One whose identical request already ended is refused (exit 3, naming it,
    its state and when it ended; nothing of the batch recorded) unless `--again`, which records
    it as a new run (docs/requests.md).
    """
    import shlex

    from gpu_platform.cli.approve import deployed_policy
    from gpu_platform.requests.identity import IdentityError
    from gpu_platform.requests.ledger import RequestEnded, SubmitterRefused, ended_line

    pol = policy_or_exit(policy_path)
    try:
        # who is calling, before anything is recorded; a required source with no answer refuses
        identity = caller_identity()
    except IdentityError as exc:
        err_console.print(f"submit: nothing recorded: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    # team members and the roster come from the deployed policy, never from --policy
    deployed = pol if policy_path is None and deployed_policy_path_is_default(ledger_url) else deployed_policy(ledger_url)
    valid, problems = [], 0
    local = _local_inventory()
    for f in files:
        try:
            valid.append(_validate_here(f, pol, local))
        except RequestError as exc:
            problems += 1
            err_console.print(
                f"[bold red]invalid[/] {f}: {len(exc.errors)} problem(s)",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            for e in exc.errors:
                err_console.print(f"  {e}", markup=False, highlight=False, soft_wrap=True)
    if problems:
        sys.exit(2)
    keyed = [r if r.request_id else r.model_copy(update={"request_id": content_request_id(r)}) for r in valid]
    try:
        ledger = Ledger(ledger_url or default_ledger_url())
        done = ledger.submissions(keyed, sources=list(files), again=again, identity=identity, policy=deployed)
    except SubmitterRefused as exc:
        for source, message in exc.conflicts:
            err_console.print(f"[bold red]refused[/] {source}: ", end="", highlight=False, soft_wrap=True)
            err_console.print(message, markup=False, highlight=False, soft_wrap=True)
        err_console.print("nothing was recorded", highlight=False, soft_wrap=True)
        sys.exit(2)
    except RequestEnded as exc:
        # the options are left out of the hint: a ledger URL may carry a password
        rerun = shlex.join(["gpu-platform", "submit", *files]) + " --again"
        if policy_path or ledger_url:
            rerun += " (with the same --policy/--ledger)"
        for source, sub in exc.ended:
            err_console.print(
                f"{source}: {ended_line(sub)}; to run it again: {rerun}", markup=False, highlight=False, soft_wrap=True
            )
        if len(files) > 1:
            err_console.print("nothing of the batch was recorded", highlight=False, soft_wrap=True)
        sys.exit(3)
    except BatchConflict as exc:
        for source, message in exc.conflicts:
            err_console.print(f"[bold red]conflict[/] {source}: {message}", highlight=False, soft_wrap=True)
        err_console.print("nothing was recorded", highlight=False, soft_wrap=True)
        sys.exit(2)
    except sa.exc.SQLAlchemyError as exc:
        # One line, without the URL or statement parameters.
        reason = str(getattr(exc, "orig", None) or type(exc).__name__).strip().splitlines()[0][:300]
        err_console.print(
            f"ledger unavailable: {type(exc).__name__}: {reason}; nothing was recorded",
            markup=False,
            soft_wrap=True,
        )
        sys.exit(1)
    if not identity.verified:
        err_console.print(
            f"submit: recorded as submitted by {identity.name!r}, unverified: no identity source is configured "
            "(GPU_PLATFORM_IDENTITY; docs/approvals.md, Identity)", markup=False, highlight=False, soft_wrap=True,
        )
    for f, sub, req in zip(files, done, keyed, strict=True):
        click.echo(sub.request_id)
        _warn(f, req)
        if sub.outcome == "live":
            err_console.print(
                f"{f}: already recorded as {sub.request_id} ({sub.state}); nothing recorded twice",
                markup=False, highlight=False, soft_wrap=True,
            )
        elif sub.again_of:
            err_console.print(
                f"{f}: recorded again as {sub.request_id} (the same request as {sub.again_of}, which ended)",
                markup=False, highlight=False, soft_wrap=True,
            )
