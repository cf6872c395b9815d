"""`gpu-platform metrics serve --port P`: the queue's Prometheus endpoint."""

from __future__ import annotations

import signal
import threading
from datetime import timedelta

import click

from gpu_platform.cli.common import ledger_option, policy_option, policy_or_exit
from gpu_platform.observe.metrics.server import DEFAULT_HOST, ServerLimits


@click.group("metrics")
def metrics() -> None:
    """Prometheus metrics of the queue."""


@metrics.command("serve")
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True)
@click.option(
    "--host",
    "--addr",
    "host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to bind; 0.0.0.0 (or ::) for every interface, e.g. in a pod scraped by Prometheus.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 1024),
    default=ServerLimits.max_connections,
    show_default=True,
    help="Requests served at once (worker threads); one more is answered 503.",
)
@click.option(
    "--max-pending",
    type=click.IntRange(1, 65536),
    default=ServerLimits.max_pending,
    show_default=True,
    help="Connections still sending their request head; one more closes the oldest.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0, min_open=True),
    default=ServerLimits.header_timeout_s,
    show_default=True,
    help="Seconds from connect to the end of the request head (silent or slow clients get 408).",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0, min_open=True),
    default=ServerLimits.idle_timeout_s,
    show_default=True,
    help="Seconds a request being served may wait on one read or write.",
)
@click.option(
    "--wait-window", default="1h", show_default=True, help="Window of the queue-wait p95 (e.g. 15m, 1h)."
)
@click.option(
    "--warehouse",
    type=click.Path(dir_okay=False),
    default=None,
    help="DuckDB warehouse for the cost forecast and budget burn gauges "
    "(default: $GPU_PLATFORM_WAREHOUSE, else $GPU_PLATFORM_HOME/warehouse.duckdb).",
)
@policy_option
@ledger_option
def serve(
    port: int,
    host: str,
    max_connections: int,
    max_pending: int,
    header_timeout: float,
    idle_timeout: float,
    wait_window: str,
    warehouse: str | None,
    policy_path: str | None,
    ledger_url: str | None,
) -> None:
    """Serve /metrics until interrupted (each scrape reads the ledger, and the warehouse's newest
    cost forecast and budget burn).

    Bounded: MAX_CONNECTIONS worker threads, MAX_PENDING connections waiting for their request
    head, HEADER_TIMEOUT / IDLE_TIMEOUT seconds (docs/observability.md)."""
    from gpu_platform.observe.metrics.collector import registry_for
    from gpu_platform.observe.metrics.server import serve as serve_registry
    from gpu_platform.paths import default_warehouse
    from gpu_platform.requests.ledger import Ledger, default_ledger_url
    from gpu_platform.units import parse_duration

    pol = policy_or_exit(policy_path)
    try:
        window = parse_duration(wait_window)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--wait-window") from exc
    if window <= timedelta(0):
        raise click.BadParameter("must be positive", param_hint="--wait-window")
    limits = ServerLimits(
        max_connections=max_connections,
        max_pending=max_pending,
        header_timeout_s=header_timeout,
        idle_timeout_s=idle_timeout,
    )
    ledger = Ledger(ledger_url or default_ledger_url())
    try:
        server, _thread = serve_registry(registry_for(ledger, pol, warehouse=warehouse or default_warehouse(), wait_window=window), port, host, limits)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving http://{shown}:{server.server_port}/metrics (Ctrl-C or SIGTERM stops)", err=True)
    stop = threading.Event()
    # SIGTERM (what Kubernetes sends a pod) stops it cleanly too, even when the process was started
    # with SIGTERM ignored
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
