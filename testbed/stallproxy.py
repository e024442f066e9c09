"""A front for the test registry that stalls in one of several ways (``how``):

* ``blob-headers``: a blob's answer sends its headers, then nothing;
* ``manifest-silent``: a manifest request is never answered;
* ``manifest-drip``: a manifest's body comes at one byte a second;
* ``redirect-loop``: every manifest request is redirected to itself;
* ``blob-trickle``: a blob's body comes at ``rate`` bytes a second (64 KiB: slow, but not stalled);
* ``blob-redirect-closed``: a blob request is redirected to a port where nothing listens;
* ``upload-silent``: a push's upload (a blob's ``PATCH`` or ``PUT``, the manifest's ``PUT``) is
  never answered.

Everything else is forwarded. A stalled answer ends when the front is closed."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler

import httpx

from testbed.forwarding import QuietHandler, RegistryFront, forward
from testbed.registry import free_port

KINDS = ("blob-headers", "manifest-silent", "manifest-drip", "redirect-loop", "blob-trickle", "blob-redirect-closed",
         "upload-silent")
TRICKLE = 64 << 10  # bytes a second


class StallProxy(RegistryFront):
    def __init__(self, upstream: str, how: str, rate: int = TRICKLE) -> None:
        if how not in KINDS:
            raise ValueError(f"unknown stall {how!r}; one of {KINDS}")
        self.how = how
        self.rate = rate  # bytes a second, for blob-trickle
        self.closing = threading.Event()
        self.blob_requests = 0  # blob GETs seen, so that a test knows a download is under way
        self.uploads = 0  # PATCH and PUT requests seen (upload-silent): a push is under way
        self.closed_port = free_port()  # nothing listens there
        super().__init__(upstream)

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        super().__exit__(*exc)  # type: ignore[arg-type]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                how, blob = proxy.how, "/blobs/" in self.path
                proxy.blob_requests += blob
                if how == "blob-headers" and blob:
                    self.send_response(200)
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    self.wfile.flush()
                    proxy.closing.wait()
                elif how == "manifest-silent" and "/manifests/" in self.path:
                    proxy.closing.wait()
                elif how == "manifest-drip" and "/manifests/" in self.path:
                    answer = httpx.get(f"http://{proxy.upstream}{self.path}",
                                       headers={"Accept": self.headers.get("Accept", "")})
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("Content-Type", ""))
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    for byte in answer.content:
                        if proxy.closing.is_set():
                            break
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(1)
                elif how == "blob-trickle" and blob:
                    answer = httpx.get(f"http://{proxy.upstream}{self.path}")
                    self.send_response(answer.status_code)
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    for start in range(0, len(answer.content), proxy.rate // 8):
                        if proxy.closing.is_set():
                            break
                        self.wfile.write(answer.content[start:start + proxy.rate // 8])
                        self.wfile.flush()
                        time.sleep(0.125)
                elif how == "blob-redirect-closed" and blob:
                    self.send_response(307)
                    self.send_header("Location", f"http://127.0.0.1:{proxy.closed_port}/storage{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif how == "redirect-loop" and "/manifests/" in self.path:
                    self.send_response(302)
                    self.send_header("Location", self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    forward(self, proxy.upstream, "GET")

            def do_HEAD(self) -> None:
                forward(self, proxy.upstream, "HEAD")

            def do_POST(self) -> None:  # an upload's start, or a mount from another repository
                forward(self, proxy.upstream, "POST")

            def do_PATCH(self) -> None:
                self._upload("PATCH")

            def do_PUT(self) -> None:
                self._upload("PUT")

            def _upload(self, method: str) -> None:
                if proxy.how != "upload-silent":
                    forward(self, proxy.upstream, method)
                    return
                proxy.uploads += 1
                proxy.closing.wait()

        return Handler
