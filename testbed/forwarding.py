"""Fronts that tests put before the test registry (:mod:`testbed.authproxy`,
:mod:`testbed.flakyproxy`): a server on loopback, and forwarding a request to the registry."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

import httpx

from testbed.registry import free_port

REQUEST_HEADERS = ("accept", "range", "content-type", "content-range")
ANSWER_HEADERS = ("Content-Type", "Docker-Content-Digest", "Content-Length", "Content-Range", "Range",
                  "Docker-Upload-UUID")


def forward(handler: BaseHTTPRequestHandler, upstream: str, method: str, *,
            request_headers: tuple[str, ...] = REQUEST_HEADERS, limit: int | None = None) -> bool:
    """Answer ``handler``'s request (and its body: a push's) with ``upstream``'s answer, upload
    locations pointing back here. With ``limit``, a longer body stops after that many bytes and
    the connection closes, as when a network breaks: True then."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() in request_headers}
    body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    with httpx.stream(method, f"http://{upstream}{handler.path}", headers=headers, content=body,
                      timeout=60) as response:
        handler.send_response(response.status_code)
        for key in ANSWER_HEADERS:
            if key in response.headers:
                handler.send_header(key, response.headers[key])
        if "Location" in response.headers:
            address = handler.server.server_address  # an IPv4 server's (HOST, PORT)
            here = f"{address[0]}:{address[1]}"  # type: ignore[index]
            handler.send_header("Location", response.headers["Location"].replace(upstream, here))
        handler.end_headers()
        if method != "GET":
            return False
        for chunk in response.iter_raw(1 << 20):
            if limit is not None and len(chunk) >= limit:
                handler.wfile.write(chunk[:limit])
                handler.wfile.flush()
                handler.close_connection = True
                return True
            handler.wfile.write(chunk)
            if limit is not None:
                limit -= len(chunk)
    return False


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, as registries), no request log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


class RegistryFront:
    """A server on a free port of ``host`` (loopback), answering with ``_handler()``'s class while entered."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.port = free_port()
        self.address = f"{host}:{self.port}"
        self._server = ThreadingHTTPServer((host, self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


class Forwarder(RegistryFront):
    """The registry as it is, at another address: the test cluster's nodes, each in a network
    namespace of its own, reach the head's bridge address, not the registry's loopback one."""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self.upstream

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                forward(self, upstream, "GET")

            def do_HEAD(self) -> None:
                forward(self, upstream, "HEAD")

        return Handler
