"""The `/metrics` HTTP endpoint: prometheus-client's own server over the queue registry."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry


def serve(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> tuple[WSGIServer, threading.Thread]:
    """Start serving `registry` on addr:port in a daemon thread; returns prometheus-client's
    (server, thread). port=0 picks a free port (`server.server_port`)."""
    return start_http_server(port, addr=addr, registry=registry)
