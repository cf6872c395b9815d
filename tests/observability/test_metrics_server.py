"""`/metrics` under hostile clients: half-open connections, slow heads, busy workers, a flood.

Behaviour, not timing: a scrape is answered while more half-open connections than the worker
cap are open, the server's threads stay within the cap plus a constant, silent and slow clients
are closed after the header timeout, and the default bind is loopback.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily

from gpu_platform.cli.metrics import serve as serve_command
from gpu_platform.observe.metrics.server import DEFAULT_HOST, ServerLimits, serve

CAP = 4


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("probe", "a probe", registry=reg).set(3)
    return reg


@contextlib.contextmanager
def _server(registry=None, **limits):
    server, _thread = serve(registry or _registry(), 0, limits=ServerLimits(**limits))
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _scrape(port: int, timeout: float = 3.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        return resp.read().decode()


def _half_open(port: int, n: int) -> list[socket.socket]:
    """n connections that send part of a request line and nothing else."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        socks.append(s)
    return socks


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """What the server sent before closing (b"" when it closed without a word); raises on timeout."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_the_default_bind_is_loopback():
    with _server() as server:
        assert server.server_address[0] == "127.0.0.1"
    assert DEFAULT_HOST == "127.0.0.1"
    host = next(p for p in serve_command.params if p.name == "host")
    assert host.default == "127.0.0.1" and {"--host", "--addr"} <= set(host.opts)


def test_half_open_connections_beyond_the_cap_leave_scrapes_working_and_are_closed_after_the_timeout():
    before = threading.active_count()
    with _server(max_connections=CAP, header_timeout_s=1.0) as server:
        socks = _half_open(server.server_port, CAP + 50)
        try:
            started = time.monotonic()
            assert "probe 3.0" in _scrape(server.server_port, timeout=3)  # one try, no retry
            assert time.monotonic() - started < 3
            assert threading.active_count() <= before + CAP + 2  # accept thread + workers
            time.sleep(1.2)
            answers = [_answer(s, timeout=2) for s in socks]  # every one closed, none left hanging
            assert all(a.startswith(b"HTTP/1.1 408 Request Timeout\r\n") for a in answers)
            assert "probe 3.0" in _scrape(server.server_port)
            assert threading.active_count() <= before + CAP + 2
        finally:
            for s in socks:
                s.close()


def test_a_client_sending_one_byte_at_a_time_is_dropped_at_the_header_timeout():
    with _server(max_connections=CAP, header_timeout_s=1.0) as server:
        sock = socket.create_connection(("127.0.0.1", server.server_port), timeout=5)
        started = time.monotonic()
        dropped = None
        with sock:
            for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    dropped = time.monotonic() - started
                    break
                time.sleep(0.25)
            if dropped is None:
                assert _answer(sock, timeout=2).startswith(b"HTTP/1.1 408")
                dropped = time.monotonic() - started
        assert 0.9 < dropped < 3  # the header timeout counts from accept, not from the last byte


def test_more_waiting_connections_than_max_pending_close_the_oldest_and_scrapes_still_work():
    with _server(max_connections=CAP, max_pending=16, header_timeout_s=30.0) as server:
        socks = _half_open(server.server_port, 200)
        try:
            assert "probe 3.0" in _scrape(server.server_port, timeout=3)
            # the oldest were closed at once (503), long before the 30 s header timeout
            assert _answer(socks[0], timeout=2).startswith(b"HTTP/1.1 503")
            time.sleep(0.2)
            assert len(server._pending) <= 16
        finally:
            for s in socks:
                s.close()


class _Blocking:
    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def collect(self):
        self.entered.release()
        self.release.wait(10)
        yield GaugeMetricFamily("slow", "a slow collector", value=1)


def test_requests_beyond_the_worker_cap_get_503_at_once():
    reg = CollectorRegistry()
    blocking = _Blocking()
    reg.register(blocking)
    before = threading.active_count()
    with _server(reg, max_connections=2, header_timeout_s=5.0) as server:
        results: list[str] = []
        busy = [threading.Thread(target=lambda: results.append(_scrape(server.server_port, 15))) for _ in range(2)]
        for t in busy:
            t.start()
        for _ in range(2):
            assert blocking.entered.acquire(timeout=10)
        started = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as err:
            _scrape(server.server_port)
        assert err.value.code == 503 and time.monotonic() - started < 2
        assert threading.active_count() <= before + 2 + 2 + 1  # 2 workers, accept thread, 2 client threads
        blocking.release.set()
        for t in busy:
            t.join(10)
        assert len(results) == 2 and all("slow 1.0" in r for r in results)


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")
def test_the_command_under_1500_half_open_connections(tmp_path):
    """`gpu-platform metrics serve` (default bind) with 1,500 half-open connections: its threads
    stay within the cap + 2 and its RSS within a few MiB; a scrape is answered; all are closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cap = 8
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_platform.cli", "metrics", "serve", "--port", str(port),
         "--max-connections", str(cap), "--header-timeout", "2", "--ledger", f"sqlite:///{tmp_path / 'l.db'}"],
        stderr=subprocess.PIPE, text=True,
    )
    socks: list[socket.socket] = []
    try:
        for _ in range(150):
            with contextlib.suppress(OSError):
                _scrape(port, timeout=2)
                break
            time.sleep(0.2)
        base = _proc_status(proc.pid)
        socks = _half_open(port, 1500)
        started = time.monotonic()
        assert "gpu_platform_requests_pending" in _scrape(port, timeout=5)
        assert time.monotonic() - started < 5
        loaded = _proc_status(proc.pid)
        print(f"server before: {base}; with 1,500 half-open connections: {loaded}")
        assert loaded["Threads"] <= base["Threads"] + cap + 2
        assert loaded["VmRSS"] - base["VmRSS"] < 32 * 1024  # KiB
        deadline = time.monotonic() + 6
        for s in socks:
            _answer(s, timeout=max(0.1, deadline - time.monotonic()))  # closed by the server, none left open
        after = _proc_status(proc.pid)
        print(f"server after they were closed: {after}")
        assert after["Threads"] <= base["Threads"] + cap + 2
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        proc.wait(timeout=10)
