"""The test registry with the OCI 1.1 referrers API, which its distribution 2.8 (Debian's) lacks:
a front that answers ``GET /v2/NAME/referrers/DIGEST`` with the index the referrers tag holds (an
empty index where there is none, as the API answers) and hides that tag, so that a client finds
the referrers only through the API. A stand-in for a registry that keeps the index itself (Harbor,
zot, distribution 3): the index here is the one the pushing client wrote."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

import httpx

from testbed.forwarding import QuietHandler, RegistryFront, forward
from testbed.oci import OCI_INDEX

_REFERRERS = re.compile(r"/v2/(?P<name>.+)/referrers/(?P<algorithm>[a-z0-9]+):(?P<hex>[0-9a-f]+)")
_REFERRERS_TAG = re.compile(r"/v2/.+/manifests/[a-z0-9]+-[0-9a-f]{64}")


class ReferrersFront(RegistryFront):
    def __init__(self, upstream: str) -> None:
        self.referrer_requests = 0  # API requests seen: a test knows the client asked the API
        super().__init__(upstream)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                asked = _REFERRERS.fullmatch(self.path)
                if asked:
                    front.referrer_requests += 1
                    tag = f"/v2/{asked['name']}/manifests/{asked['algorithm']}-{asked['hex']}"
                    found = httpx.get(f"http://{front.upstream}{tag}", headers={"Accept": OCI_INDEX}, timeout=60)
                    body = found.content if found.status_code == 200 else \
                        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
                    self._answer(200, body)
                elif _REFERRERS_TAG.fullmatch(self.path):
                    self._answer(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}')
                else:
                    forward(self, front.upstream, "GET")

            def do_HEAD(self) -> None:
                forward(self, front.upstream, "HEAD")

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", OCI_INDEX if status == 200 else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
