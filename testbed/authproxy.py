"""An authenticating front for the test registry: a token server plus a proxy that demands
``Authorization``, as Docker Hub, nvcr.io or GitLab do.

* ``mode="bearer"``: requests without a valid token get ``401`` with
  ``WWW-Authenticate: Bearer realm=".../token",service="hydria-test",scope="repository:R:pull"``;
  ``GET /token`` hands out a token, to anonymous clients only when ``anonymous`` is set, and to
  clients with the right Basic credentials always.
* ``mode="basic"``: requests need the Basic credentials themselves.

A push (``POST``, ``PATCH``, ``PUT``, ``DELETE``) is challenged for the scope ``pull,push``, whose
token only clients with the Basic credentials get.

It counts token requests, so tests can check that one token serves every blob.
"""

from __future__ import annotations

import base64
import re
import secrets
from http.server import BaseHTTPRequestHandler
from typing import Literal

from testbed.forwarding import QuietHandler, RegistryFront, forward


class AuthProxy(RegistryFront):
    def __init__(self, upstream: str, *, mode: Literal["bearer", "basic"] = "bearer",
                 user: str = "ada", password: str = "s3cret", anonymous: bool = False,
                 realm: str | None = None, host: str = "127.0.0.1") -> None:
        self.mode = mode
        self.realm = realm  # the Bearer realm to announce (default: this front's /token)
        self.user, self.password, self.anonymous = user, password, anonymous
        self.tokens: set[str] = set()
        self.push_tokens: set[str] = set()  # handed to clients with the credentials
        self.token_requests = 0
        super().__init__(upstream, host)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/token"):
                    self._token()
                elif proxy._allowed(self.headers.get("Authorization", "")):
                    self._forward("GET")
                else:
                    self._challenge()

            def do_HEAD(self) -> None:
                if proxy._allowed(self.headers.get("Authorization", "")):
                    self._forward("HEAD")
                else:
                    self._challenge()

            def _push(self, method: str) -> None:
                if proxy._allowed(self.headers.get("Authorization", ""), push=True):
                    self._forward(method)
                else:
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._challenge("pull,push")

            def do_POST(self) -> None:
                self._push("POST")

            def do_PATCH(self) -> None:
                self._push("PATCH")

            def do_PUT(self) -> None:
                self._push("PUT")

            def do_DELETE(self) -> None:
                self._push("DELETE")

            def _challenge(self, actions: str = "pull") -> None:
                match = re.match(r"/v2/(.+)/(manifests|blobs)/", self.path)
                repository = match.group(1) if match else ""
                if proxy.mode == "basic":
                    header = 'Basic realm="hydria-test"'
                else:
                    realm = proxy.realm if proxy.realm is not None else f"http://{proxy.address}/token"
                    header = (f'Bearer realm="{realm}",service="hydria-test",'
                              f'scope="repository:{repository}:{actions}"')
                self._reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": header})

            def _token(self) -> None:
                proxy.token_requests += 1
                credentialed = proxy._basic_ok(self.headers.get("Authorization", ""))
                if not (credentialed or proxy.anonymous and "Authorization" not in self.headers
                        and "push" not in self.path):
                    self._reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                    return
                token = secrets.token_hex(16)
                proxy.tokens.add(token)
                if credentialed:
                    proxy.push_tokens.add(token)
                self._reply(200, f'{{"token":"{token}"}}'.encode(), {"Content-Type": "application/json"})

            def _forward(self, method: str) -> None:
                forward(self, proxy.upstream, method)

            def _reply(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _basic_ok(self, header: str) -> bool:
        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return header == f"Basic {expected}"

    def _allowed(self, header: str, push: bool = False) -> bool:
        if self.mode == "basic":
            return self._basic_ok(header)
        return header.startswith("Bearer ") and header[len("Bearer "):] in (self.push_tokens if push else self.tokens)
