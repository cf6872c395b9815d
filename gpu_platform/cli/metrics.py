"""`gpu-platform metrics serve --port P`: the queue's Prometheus endpoint."""

from __future__ import annotations

import threading
from datetime import timedelta

import click

from gpu_platform.cli.common import ledger_option, policy_option, policy_or_exit
from gpu_platform.observe.metrics.collector import registry_for
from gpu_platform.observe.metrics.server import serve as serve_registry
from gpu_platform.requests.ledger import Ledger, default_ledger_url
from gpu_platform.units import parse_duration


@click.group("metrics")
def metrics() -> None:
    """Prometheus metrics of the queue."""


@metrics.command("serve")
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True)
@click.option(
    "--addr", default="0.0.0.0", show_default=True, help="Address to bind (127.0.0.1: this host only)."
)
@click.option(
    "--wait-window", default="1h", show_default=True, help="Window of the queue-wait p95 (e.g. 15m, 1h)."
)
@policy_option
@ledger_option
def serve(port: int, addr: str, wait_window: str, policy_path: str | None, ledger_url: str | None) -> None:
    """Serve /metrics until interrupted (each scrape reads the ledger)."""
    pol = policy_or_exit(policy_path)
    try:
        window = parse_duration(wait_window)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--wait-window") from exc
    if window <= timedelta(0):
        raise click.BadParameter("must be positive", param_hint="--wait-window")
    ledger = Ledger(ledger_url or default_ledger_url())
    server, _thread = serve_registry(registry_for(ledger, pol, wait_window=window), port, addr)
    click.echo(f"serving http://{addr}:{server.server_port}/metrics (Ctrl-C stops)", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
