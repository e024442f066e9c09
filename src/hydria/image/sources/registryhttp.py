"""Talking to one repository of a registry over the OCI distribution API: HTTPS (plain HTTP where
``HYDRIA_ALLOW_HTTP`` allows and HTTPS cannot connect), retries of server errors, and
authentication as registries ask for it: anonymous first, then, on a 401, a Bearer token from
the ``WWW-Authenticate`` realm (with the user's credentials when there are any) or Basic
credentials. A token serves every later request; a 401 that asks for another scope (a push
after a pull) gets a token of its own. Pulls (image/sources/registry.py) and pushes
(image/push.py) both go through here.
"""

from __future__ import annotations

import base64
import getpass
import json
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Union

import httpx

from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.image.ref.reference import RegistryImage
from hydria.image.sources import credentials
from hydria.log import Logger

log = Logger(__name__)

# Every read from a registry is bounded (docs/import.md, "Slow and stalled registries"): no byte for
# STALL seconds (or HYDRIA_TRANSFER_TIMEOUT, when shorter) is a stall; a manifest or token must
# arrive whole within STALL seconds (or HYDRIA_TRANSFER_TIMEOUT).
STALL = 60
MAX_DOCUMENT = 32 << 20
# What sending a request can raise besides transport errors: a URL that is none (a realm of
# "::::", a redirect's Location), a host that idna refuses (UnicodeError), a redirect loop.
_UNSENDABLE = (httpx.HTTPError, httpx.InvalidURL, UnicodeError)

_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}
Content = Union[bytes, Iterator[bytes], None]  # a request's body


class RegistryError(HydriaError):
    """The registry could not be reached or refused a request."""


class AccessDenied(RegistryError):
    """The registry refused these credentials (or no credentials) for the image."""


def describe(error: Exception, stall: float) -> str:
    """An httpx error in words (a read timeout's message is empty)."""
    if isinstance(error, httpx.TimeoutException):
        return f"no data for {stall:g} s"
    return str(error) or type(error).__name__


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="..."`` -> ("bearer", {"realm": ..., "service": ...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {key.lower(): quoted if quoted or not plain else plain
              for key, quoted, plain in re.findall(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))', rest)}
    return scheme.lower(), params


class RegistryHttp:
    """Requests to ``ref``'s repository; ``anonymous``: never send credentials."""

    def __init__(self, ref: RegistryImage, settings: Settings, *, anonymous: bool = False,
                 connections: int | None = None) -> None:
        self.ref = ref
        self.settings = settings
        self.anonymous = anonymous
        self.scheme = "https"
        self.authorization: str | None = None
        self._challenges: set[str] = set()  # answered already: asked again, the credentials do not do
        self._login: tuple[str, str] | None = None
        self._login_resolved = False
        self.stall = min(STALL, settings.transfer_timeout or STALL)
        self.client = httpx.Client(
            timeout=httpx.Timeout(self.stall, connect=settings.connect_timeout or None),
            follow_redirects=True,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            transport=httpx.HTTPTransport(retries=settings.transfer_retries),
        )

    def close(self) -> None:
        self.client.close()

    def url(self, path: str) -> str:
        """``path`` under the repository (``blobs/...``), or absolute (an upload's Location)."""
        if path.startswith(("http://", "https://")):
            return path
        if path.startswith("/"):
            return f"{self.scheme}://{self.ref.registry}{path}"
        return f"{self.scheme}://{self.ref.registry}/v2/{self.ref.repository}/{path}"

    @contextmanager
    def request(self, path: str, *, method: str = "GET", accept: str | None = None, offset: int = 0,
                headers: Mapping[str, str] | None = None, content: bytes | None = None,
                allowed: tuple[int, ...] = ()) -> Iterator[httpx.Response]:
        """The response to ``method path`` (from byte ``offset`` on, if the registry honours
        ranges), authenticated as the registry asks. Raises RegistryError for a status of 400
        or more, unless ``allowed``."""
        sent = dict(headers or {})
        if accept:
            sent["Accept"] = accept
        if offset:
            sent["Range"] = f"bytes={offset}-"
        for attempt in range(self.settings.transfer_retries + 1):
            response = self.send(method, path, sent, content)
            challenge = response.headers.get("WWW-Authenticate")
            if response.status_code == 401 and challenge and challenge not in self._challenges:
                response.close()
                self._challenges.add(challenge)
                self._authenticate(challenge)
                response = self.send(method, path, sent, content)
            if response.status_code >= 500 and attempt < self.settings.transfer_retries:
                response.close()
                time.sleep(min(2 ** attempt, 10))
                continue
            break
        try:
            if response.status_code >= 400 and response.status_code not in allowed:
                response.read()
                raise self.http_error(response)
            yield response
        finally:
            response.close()

    def send(self, method: str, path: str, headers: Mapping[str, str], content: Content = None) -> httpx.Response:
        if self.authorization:
            headers = {**headers, "Authorization": self.authorization}
        try:
            return self.client.send(self.client.build_request(method, self.url(path), headers=headers,
                                                              content=content), stream=True)
        except httpx.ConnectError as e:
            if self.scheme == "https" and self.settings.allow_http and not path.startswith("https://"):
                log.debug("https to %s failed (%s); trying plain http", self.ref.registry, e)
                self.scheme = "http"
                return self.send(method, path, headers, content)
            peer = self.peer(e)
            hint = "check the registry address and your network"
            if "SSL" in str(e) or "ssl" in str(e):
                hint = "if this registry serves plain HTTP, set HYDRIA_ALLOW_HTTP=y (insecure)"
            elif not peer.startswith("registry "):
                hint = "the registry sends its downloads there: the registry's storage is down or unreachable from here"
            raise RegistryError(f"Could not connect to {peer}: {e}", hint=hint) from None
        except httpx.ConnectTimeout as e:
            raise RegistryError(f"Could not connect to {self.peer(e)}: timed out after "
                                f"{self.settings.connect_timeout} s",
                                hint="raise HYDRIA_CONNECT_TIMEOUT or check the network") from None
        except httpx.TooManyRedirects:
            raise RegistryError(f"registry {self.ref.registry}: too many redirects for {self.url(path)}",
                                hint="the registry or a proxy in front of it redirects in a loop") from None
        except httpx.TransportError as e:
            raise RegistryError(f"Could not talk to {self.peer(e)}: {describe(e, self.stall)}") from None
        except _UNSENDABLE as e:
            raise RegistryError(f"Could not talk to registry {self.ref.registry}: {e}",
                                hint="check the registry's address in the image URI") from None

    def peer(self, error: httpx.HTTPError) -> str:
        """Who failed to answer: the registry, or the address it redirected to (blob storage)."""
        try:
            url = error.request.url
        except RuntimeError:  # no request attached
            return f"registry {self.ref.registry}"
        address = f"{url.host}:{url.port}" if url.port else url.host
        if self.ref.registry in (address, url.host):
            return f"registry {self.ref.registry}"
        return f"{address} (where registry {self.ref.registry} redirected)"

    def http_error(self, response: httpx.Response) -> RegistryError:
        code = response.status_code
        message = f"URL {response.request.url} returned error code: {code} {_REASONS.get(code, response.reason_phrase)}"
        if code in (401, 403):
            who = f"as {self._login[0]}" if self._login else "anonymously"
            return AccessDenied(message, hint=f"access denied {who}: check the image name and your "
                                 f"credentials: {self.credentials_state()}{self._official_image_hint()}")
        if code == 404:
            return RegistryError(message, hint=f"{self.ref.repository}:{self.ref.reference} does not exist "
                                 f"on {self.ref.registry}: check the image name and tag{self._official_image_hint()}")
        return RegistryError(message)

    def _official_image_hint(self) -> str:
        """For a one-part name on a registry other than Docker Hub (a mirror of it, say), where
        Docker Hub's official images are ``library/NAME``: the name to try."""
        if "/" in self.ref.repository:
            return ""
        return f"; Docker Hub's official images are library/NAME there: try {self.ref.registry}#library/{self.ref.repository}"

    def credentials_state(self) -> str:
        """Which credentials file was read and what it has for this registry (for hints)."""
        path = Path(self.settings.config_path, ".credentials")
        try:
            return credentials.describe(credentials.load(path), path, self.ref.registry)
        except HydriaError as e:
            return e.message

    def _credentials(self) -> tuple[str, str] | None:
        if self._login_resolved or self.anonymous:
            return self._login
        self._login_resolved = True
        entries = credentials.load(Path(self.settings.config_path, ".credentials"))
        entry = credentials.find(entries, self.ref.registry, self.ref.user)
        user = self.ref.user or (entry.login if entry else None)
        if user is None:
            return None
        password = credentials.password_of(entry) if entry else None
        if password is None:
            if not sys.stdin.isatty():
                raise RegistryError(
                    f"no password for {user} at {self.ref.registry}",
                    hint=f"add 'machine {credentials.host_of(self.ref.registry)} login {user} password ...' "
                         f"to {self.settings.config_path}/.credentials")
            password = getpass.getpass(f"Password for {user}@{self.ref.registry}: ")
        self._login = (user, password)
        return self._login

    def _authenticate(self, challenge: str) -> None:
        scheme, params = parse_challenge(challenge)
        login = self._credentials()
        if scheme == "basic":
            if login is None:
                raise AccessDenied(f"registry {self.ref.registry} requires a login",
                                   hint=f"add your credentials: {self.credentials_state()}")
            self.authorization = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
            return
        if scheme != "bearer":
            raise RegistryError(f"Unsupported authentication method {scheme}")
        realm = params.pop("realm", None)
        if not realm:
            raise RegistryError(f"Could not parse authentication realm from {self.ref.registry}")
        try:
            request = self.client.build_request("GET", realm, params=params)
            response = self.client.send(request, auth=login, stream=True)
        except _UNSENDABLE as e:
            raise RegistryError(f"Could not get a token from {realm}: {e}") from None
        try:
            if response.status_code >= 400:
                who = f"as {login[0]}" if login else "anonymously"
                raise AccessDenied(f"authentication {who} at {realm} failed: {response.status_code}",
                                   hint=f"check your credentials: {self.credentials_state()}")
            data = self.read_document(response, f"the token from {realm}")
        finally:
            response.close()
        try:
            document = json.loads(data)
            token = document.get("token") or document.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not token:
            raise RegistryError(f"the token server {realm} returned no token")
        self.authorization = f"Bearer {token}"

    def read_document(self, response: httpx.Response, what: str) -> bytes:
        """A small body (manifest, token), which must arrive whole within the transfer timeout
        (STALL seconds by default) and be at most MAX_DOCUMENT bytes. Raises RegistryError."""
        limit = self.settings.transfer_timeout or STALL
        deadline = time.monotonic() + limit
        data = bytearray()
        try:
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_DOCUMENT:
                    raise RegistryError(f"{what} is larger than {MAX_DOCUMENT >> 20} MiB; not a manifest")
                if time.monotonic() > deadline:
                    raise RegistryError(f"{what} did not arrive within {limit} s",
                                        hint="the registry is stalled or very slow; HYDRIA_TRANSFER_TIMEOUT sets the limit")
        except httpx.TransportError as e:
            raise RegistryError(f"Could not read {what}: {describe(e, self.stall)}",
                                hint="the registry is stalled or the network broke; try again") from None
        return bytes(data)
