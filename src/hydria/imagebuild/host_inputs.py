"""What the host gives a build's ``RUN`` steps besides the Dockerfile: secrets (``--secret``, read
by ``RUN --mount=type=secret``), volumes (``--volume``), the site's certificate authorities
(``HYDRIA_BUILD_CA_BUNDLE``) and the caller's proxy variables. None of it enters the image, and
none of it a step's cache key but a secret's id and place (docs/build.md, "What the host gives
the steps")."""

from __future__ import annotations

import os
from collections.abc import Mapping

from hydria.errors import UsageError
from hydria.imagebuild.sandbox import RunMount
from hydria.imagebuild.state import PROXY_ARGS
from hydria.paths import open_binary
from hydria.record import Record

CA_TARGET = "/run/hydria-build/ca-bundle.crt"  # where every RUN finds HYDRIA_BUILD_CA_BUNDLE
# The variables by which common programs take a CA bundle: OpenSSL's (Python, wget, Ruby), pip,
# requests, curl, git, Node (which adds it to its own), the AWS tools, Cargo, httplib2, gRPC.
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                "NODE_EXTRA_CA_CERTS", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO", "HTTPLIB2_CA_CERTS",
                "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
UNKEYED = frozenset(PROXY_ARGS) | frozenset(CA_VARIABLES)  # a step's variables that its cache key leaves out


class Secret(Record):
    """A secret that ``--secret`` gives: a file of the host, or a value (of a variable)."""

    path: str | None = None
    value: str | None = None

    def content(self) -> bytes:
        if self.path is None:
            return os.fsencode(self.value or "")
        with open_binary(self.path) as source:
            return source.read()

    def write(self, target: str, mode: int) -> None:
        """Write the secret to ``target`` (a new file of a private folder) with ``mode``."""
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(self.content())
        os.chmod(target, mode)


class HostInputs(Record):
    """What ``hydria build`` was given for its steps: secrets by id (a file of the host each),
    volumes, the CA bundle's host path (or None) and the proxy variables."""

    secrets: Mapping[str, Secret] = {}
    volumes: tuple[RunMount, ...] = ()
    ca_bundle: str | None = None
    proxies: Mapping[str, str] = {}

    def environment(self) -> dict[str, str]:
        """The variables every RUN gets from the host (the image's ENV wins over them)."""
        return {**self.proxies, **({name: CA_TARGET for name in CA_VARIABLES} if self.ca_bundle else {})}

    def mounts(self) -> tuple[RunMount, ...]:
        """The bind mounts every RUN gets from the host."""
        bundle = (RunMount("bind", CA_TARGET, self.ca_bundle),) if self.ca_bundle else ()
        return (*bundle, *self.volumes)


def secrets(items: list[str], environment: Mapping[str, str]) -> dict[str, Secret]:
    """``--secret id=ID,src=PATH`` (BuildKit's; ``source=``, ``type=file``) or ``id=ID,env=VAR``
    (the value of the caller's variable VAR), each id once. Raises UsageError naming the item."""
    found: dict[str, Secret] = {}
    for item in items:
        fields = dict(part.partition("=")[::2] for part in item.split(","))
        unknown = sorted(set(fields) - {"id", "src", "source", "type", "env"})
        kind = fields.get("type", "env" if "env" in fields else "file")
        name, path = fields.get("id", ""), fields.get("src", fields.get("source", ""))
        if unknown or kind not in ("file", "env") or not name or (path == "") == ("env" not in fields):
            raise UsageError(f"--secret {item}: not a secret hydria build takes",
                             hint="--secret id=ID,src=FILE or --secret id=ID,env=VARIABLE")
        if name in found:
            raise UsageError(f"--secret {item}: the id {name} is given twice", hint="one --secret per id")
        if "env" in fields:
            if fields["env"] not in environment:
                raise UsageError(f"--secret {item}: the variable {fields['env']} is not set",
                                 hint=f"export {fields['env']}, or give the secret as a file (src=FILE)")
            found[name] = Secret(value=environment[fields["env"]])
            continue
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise UsageError(f"--secret {item}: {path} is not a file you can read", hint="src= names a file")
        found[name] = Secret(path=os.path.abspath(path))
    return found


def volumes(items: list[str]) -> tuple[RunMount, ...]:
    """``--volume HOST:CONTAINER[:ro|rw]`` (podman build's ``-v``): a folder or file of the host
    that every RUN sees, writable unless ``ro``. Raises UsageError naming the item."""
    found = []
    for item in items:
        host, _, rest = item.partition(":")
        target, _, option = rest.partition(":")
        if not host or not target.startswith("/") or option not in ("", "ro", "rw"):
            raise UsageError(f"--volume {item}: not HOST:CONTAINER[:ro|rw]", hint="e.g. --volume /scratch/wheels:/wheels:ro")
        if not os.path.exists(host):
            raise UsageError(f"--volume {item}: {host} does not exist", hint="the host side names a folder or file")
        found.append(RunMount("bind", os.path.normpath(target), os.path.abspath(host), writable=option != "ro"))
    return tuple(found)


def ca_bundle(path: str) -> str | None:
    """HYDRIA_BUILD_CA_BUNDLE's file (None where it is empty). Raises UsageError where it is no
    readable file: every RUN would otherwise fail on its first TLS connection."""
    if not path:
        return None
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise UsageError(f"HYDRIA_BUILD_CA_BUNDLE {path} is not a file you can read",
                         hint="set it to a PEM file of certificate authorities (the host's bundle, e.g. "
                              "/etc/ssl/certs/ca-certificates.crt), or unset it")
    return os.path.abspath(path)


def proxies(environment: Mapping[str, str], build_args: Mapping[str, str]) -> dict[str, str]:
    """The proxy variables of the caller's environment (as podman build's ``--http-proxy``), and
    those that ``--build-arg`` gives, which win."""
    return {**{k: v for k, v in environment.items() if k in PROXY_ARGS},
            **{k: v for k, v in build_args.items() if k in PROXY_ARGS}}
