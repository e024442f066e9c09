"""A front for the test registry whose blob downloads break off, as on a flaky network: the body
of each of the first ``breaks`` blob answers longer than ``after`` bytes stops there and the
connection closes. It passes Range requests on (the registry honours them) unless ``ranges`` is False, and
records the ranges asked for."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

from testbed.forwarding import REQUEST_HEADERS, forward
from testbed.registry import free_port


class BreakingProxy:
    def __init__(self, upstream: str, *, after: int, breaks: int, ranges: bool = True) -> None:
        self.upstream = upstream
        self.after, self.breaks = after, breaks
        self.request_headers = REQUEST_HEADERS if ranges else ("accept",)
        self.ranges_asked: list[str] = []
        self.address = f"127.0.0.1:{free_port()}"
        host, port = self.address.split(":")
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, int(port)), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _broke(self) -> None:
        with self._lock:
            self.breaks -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                limit = None
                if "/blobs/" in self.path:
                    if "Range" in self.headers:
                        proxy.ranges_asked.append(self.headers["Range"])
                    limit = proxy.after if proxy.breaks > 0 else None
                if forward(self, proxy.upstream, "GET", request_headers=proxy.request_headers, limit=limit):
                    proxy._broke()

            def do_HEAD(self) -> None:
                forward(self, proxy.upstream, "HEAD", request_headers=proxy.request_headers)

        return Handler

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
