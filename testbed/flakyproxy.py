"""A front for the test registry that behaves like a poor network: blob answers start ``delay``
seconds late (a distant registry), and the body of each of the first ``breaks`` blob answers
longer than ``after`` bytes stops there and the connection closes. It passes Range requests on
(the registry honours them) unless ``ranges`` is False, records the ranges asked for, and counts
the most blob answers it gave at once."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler

from testbed.forwarding import REQUEST_HEADERS, QuietHandler, RegistryFront, forward


class FlakyProxy(RegistryFront):
    def __init__(self, upstream: str, *, after: int = 0, breaks: int = 0, ranges: bool = True,
                 delay: float = 0.0) -> None:
        self.after, self.breaks, self.delay = after, breaks, delay
        self.most_at_once = 0
        self._at_once = 0
        self.request_headers = REQUEST_HEADERS if ranges else ("accept",)
        self.ranges_asked: list[str] = []
        self._lock = threading.Lock()
        super().__init__(upstream)

    def _broke(self) -> None:
        with self._lock:
            self.breaks -= 1

    def _answering(self, change: int) -> None:
        with self._lock:
            self._at_once += change
            self.most_at_once = max(self.most_at_once, self._at_once)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if "/blobs/" not in self.path:
                    forward(self, proxy.upstream, "GET", request_headers=proxy.request_headers)
                    return
                if "Range" in self.headers:
                    proxy.ranges_asked.append(self.headers["Range"])
                proxy._answering(+1)
                try:
                    time.sleep(proxy.delay)
                    limit = proxy.after if proxy.breaks > 0 else None
                    if forward(self, proxy.upstream, "GET", request_headers=proxy.request_headers, limit=limit):
                        proxy._broke()
                finally:
                    proxy._answering(-1)

            def do_HEAD(self) -> None:
                forward(self, proxy.upstream, "HEAD", request_headers=proxy.request_headers)

        return Handler
