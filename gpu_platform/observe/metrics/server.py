"""The `/metrics` HTTP endpoint: prometheus-client's WSGI app behind a server a scraper can't break.

prometheus-client's own `start_http_server` starts a thread per connection, with no cap and no
timeout, so a few hundred connections that never finish their request hold a few hundred
threads and new scrapes time out. This server keeps the stdlib's HTTP handling (`wsgiref`'s
request handler parses the request, prometheus-client's `make_wsgi_app` answers it) and bounds
what a connection can hold:

- **Header phase without a thread.** One thread accepts connections and collects each one's
  request head with `selectors` (non-blocking reads until the blank line that ends the head; it
  only looks for that line, the parsing is `http.server`'s). A connection whose head is not
  complete `header_timeout_s` after it was accepted (silent, or one byte a second) gets `408`
  and is closed. At most `max_pending` connections wait for their head; one more closes the
  oldest waiting one (`503`), so a flood of half-open connections never shuts a real scraper
  out: a scrape sends its head at once and is served before it can become the oldest.
  A head over `max_header_bytes` gets `431`.
- **A bounded worker pool.** A complete request is served by one of `max_connections` worker
  threads (`ThreadPoolExecutor`); when all are busy it gets `503` at once, never a queue. A
  worker's socket has `idle_timeout_s` (`socket.settimeout`): a client that stops reading the
  answer is dropped after that long.

Threads: one accept thread plus at most `max_connections` workers. Memory: at most
`max_pending` x `max_header_bytes` of buffered heads (2 MiB with the defaults) plus the kernel's
socket buffers, and `max_connections` answers being written. Binds 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import io
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerLimits:
    """What one client may hold of the endpoint (see the module docstring)."""

    max_connections: int = 16
    """requests served at once (worker threads); one more gets 503"""
    max_pending: int = 128
    """connections still sending their request head; one more closes the oldest"""
    header_timeout_s: float = 5.0
    """from accept to the end of the request head"""
    idle_timeout_s: float = 10.0
    """longest wait on one read or write of a request being served"""
    max_header_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_pending < 1 or self.max_header_bytes < 1024:
            raise ValueError("max_connections and max_pending must be >= 1, max_header_bytes >= 1024")
        if not (self.header_timeout_s > 0 and self.idle_timeout_s > 0):
            raise ValueError("timeouts must be positive")


def _status(code: int, text: str) -> bytes:
    return (
        f"HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nContent-Length: {len(text) + 1}\r\n"
        f"Connection: close\r\nRetry-After: 1\r\n\r\n{text}\n"
    ).encode()


_TIMEOUT = _status(408, "Request Timeout")
_BUSY = _status(503, "Service Unavailable")
_TOO_LARGE = _status(431, "Request Header Fields Too Large")


class _Prefixed(io.RawIOBase):
    """A socket read after the bytes the accept thread already read from it."""

    def __init__(self, prefix: bytes, sock: socket.socket):
        self._prefix = memoryview(prefix)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return self._sock.recv_into(b)


class _Handler(WSGIRequestHandler):
    """wsgiref's handler, reading the head the accept thread collected; no access log."""

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain socket file: closed, or it would keep the socket open
        self.rfile = io.BufferedReader(_Prefixed(self.server.take_head(self.request), self.request))

    def log_message(self, format, *args) -> None:
        pass


@dataclass
class _Pending:
    addr: tuple
    deadline: float
    head: bytearray


class MetricsServer(WSGIServer):
    """A WSGI server with a bounded header phase and a bounded worker pool.

    `serve_forever` is replaced by the accept loop of :meth:`start`; `shutdown` and
    `server_close` behave as on any `socketserver` server."""

    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, addr: str, port: int, app, limits: ServerLimits | None = None):
        self.limits = limits or ServerLimits()
        info = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        self.address_family = info[0][0]
        super().__init__(info[0][4][:2], _Handler)
        self.set_app(app)
        self.socket.setblocking(False)
        self._workers = ThreadPoolExecutor(self.limits.max_connections, thread_name_prefix="metrics-worker")
        self._free = threading.BoundedSemaphore(self.limits.max_connections)
        self._pending: dict[socket.socket, _Pending] = {}  # insertion order = deadline order
        self._heads: dict[socket.socket, bytes] = {}
        self._heads_lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-accept", daemon=True)
        self.rejected = 0
        """connections answered 408/431/503 or closed by the caps (for tests and logs)"""

    def start(self) -> threading.Thread:
        self._thread.start()
        return self._thread

    def take_head(self, sock: socket.socket) -> bytes:
        with self._heads_lock:
            return self._heads.pop(sock, b"")

    # -- the accept thread ---------------------------------------------------------------

    def _loop(self) -> None:
        sel = self._selector
        sel.register(self.socket, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                first = next(iter(self._pending.values()), None)
                wait = 1.0 if first is None else min(1.0, max(0.0, first.deadline - now))
                for key, _ in sel.select(wait):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._wake_r.recv(64)
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._expire(time.monotonic())
        finally:
            for sock in list(self._pending):
                self._drop(sock, None)
            sel.close()

    def _accept(self) -> None:
        for _ in range(64):  # then serve reads again; the rest wait in the listen backlog
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. EMFILE: the connection stays in the backlog
            sock.setblocking(False)
            while len(self._pending) >= self.limits.max_pending:
                self._drop(next(iter(self._pending)), _BUSY)
            self._pending[sock] = _Pending(addr, time.monotonic() + self.limits.header_timeout_s, bytearray())
            self._selector.register(sock, selectors.EVENT_READ, "read")

    def _read(self, sock: socket.socket) -> None:
        pending = self._pending.get(sock)
        if pending is None:
            return
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock, None)
            return
        head = pending.head
        start = max(0, len(head) - 3)
        head += data
        end = head.find(b"\r\n\r\n", start)
        if end < 0:
            end = head.find(b"\n\n", start)
        if end < 0:
            if len(head) > self.limits.max_header_bytes:
                self._drop(sock, _TOO_LARGE)
            return
        self._selector.unregister(sock)
        del self._pending[sock]
        if not self._free.acquire(blocking=False):
            self.rejected += 1
            self._close(sock, _BUSY)
            return
        with self._heads_lock:
            self._heads[sock] = bytes(head)
        sock.setblocking(True)
        sock.settimeout(self.limits.idle_timeout_s)
        try:
            self._workers.submit(self._serve, sock, pending.addr)
        except RuntimeError:  # shutting down
            self._free.release()
            self.take_head(sock)
            self._close(sock, _BUSY)

    def _expire(self, now: float) -> None:
        while self._pending:
            sock, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                return
            self._drop(sock, _TIMEOUT)

    def _drop(self, sock: socket.socket, answer: bytes | None) -> None:
        self._pending.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        if answer is not None:
            self.rejected += 1
        self._close(sock, answer)

    @staticmethod
    def _close(sock: socket.socket, answer: bytes | None) -> None:
        try:
            if answer is not None:
                sock.setblocking(False)
                sock.send(answer)  # best effort: never wait on a client here
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    # -- a worker --------------------------------------------------------------------

    def _serve(self, sock: socket.socket, addr: tuple) -> None:
        try:
            self.finish_request(sock, addr)
        except OSError:
            pass  # timed out, reset or gone: nothing to answer
        except Exception:
            self.handle_error(sock, addr)
        finally:
            self.take_head(sock)
            self.shutdown_request(sock)
            self._free.release()

    # -- stopping --------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._workers.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:
        super().server_close()
        for s in (self._wake_r, self._wake_w):
            s.close()


def serve(
    registry: CollectorRegistry, port: int, addr: str = DEFAULT_HOST, limits: ServerLimits | None = None
) -> tuple[MetricsServer, threading.Thread]:
    """Start serving `registry` on addr:port (127.0.0.1 by default) in a daemon thread; returns
    (server, accept thread). port=0 picks a free port (`server.server_port`)."""
    server = MetricsServer(addr, port, make_wsgi_app(registry), limits)
    return server, server.start()
