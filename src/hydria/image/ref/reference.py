"""Image URIs: parsing, normalisation and the default output file name. Pure functions.

Registry images follow enroot's grammar, ``docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]``, and
also the standard ``docker://[USER@]REGISTRY/IMAGE[:TAG|@DIGEST]``; ``dockerd://`` and
``podman://`` name an image of a local engine; ``oci://DIR[:REF]``, ``oci-archive://FILE[:REF]``
and ``docker-archive://FILE`` read images from disk.
"""

from __future__ import annotations

import os
import re

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.record import Record

DOCKER_HUB = "registry-1.docker.io"
DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", DOCKER_HUB})
SCHEMES = ("docker", "dockerd", "podman", "oci", "oci-archive", "docker-archive")

_USER = r"(?:(?P<user>[A-Za-z0-9_.!~*'()%;:&=+$,@-]+)@)?"
_HOST = r"(?P<host>[A-Za-z0-9._-]+(?::[0-9]+)?)"
_IMAGE = r"(?P<image>[a-z0-9._-]+(?:/[a-z0-9._-]+)*)"
_NAME = r"(?P<image>[a-z0-9._-]+)"
_TAG = r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))"
_DIGEST = r"(?:@(?P<digest>sha256:[a-f0-9]{64}))"
# enroot's order: REGISTRY/IMAGE, then a bare NAME (Docker Hub), then its own REGISTRY#IMAGE; in
# each, the form with a digest first, so that "name@sha256:..." is never read as USER@NAME:TAG.
_DOCKER_FORMS = tuple(re.compile(base + suffix) for base in (
    rf"{_USER}{_HOST}/{_IMAGE}",
    rf"{_USER}{_NAME}",
    rf"{_USER}(?P<registry>[A-Za-z0-9._-]+(?::[0-9]+)?)#{_IMAGE}",
) for suffix in (f"{_TAG}?{_DIGEST}", f"{_TAG}?"))
_ENGINE_IMAGE = re.compile(r"[A-Za-z0-9/._:@-]+")


class InvalidReference(HydriaError):
    """A URI that names no image."""


class RegistryImage(Record):
    """``docker://``: an image in a registry."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None
    user: str | None = None

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when given (it wins over a tag), else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        """``REGISTRY/REPOSITORY`` as policies and signatures write it (Docker Hub: ``docker.io``)."""
        return f"{'docker.io' if self.registry == DOCKER_HUB else self.registry}/{self.repository}"

    @property
    def exact_name(self) -> str:
        """:attr:`name` with the digest, else the tag (``latest`` by default)."""
        return self.name + (f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}")

    @property
    def uri(self) -> str:
        """The canonical URI, recorded in the image's provenance line."""
        return f"docker://{self.registry}#{self.repository}" + (
            f"@{self.digest}" if self.digest else f":{self.reference}")

    def default_output(self) -> str:
        name = self.repository
        if self.registry == DOCKER_HUB:
            name = name.removeprefix("library/")
        name = name.replace("/", "+")
        if self.digest or self.tag:
            name += "+" + (self.digest or self.tag or "")
        return name + ".sqsh"


class EngineImage(Record):
    """``dockerd://`` or ``podman://``: an image a local container engine has or can pull."""

    engine: str  # "docker" or "podman"
    image: str

    @property
    def uri(self) -> str:
        return f"{'dockerd' if self.engine == 'docker' else 'podman'}://{self.image}"

    def default_output(self) -> str:
        return re.sub(r"[:/]", "+", self.image) + ".sqsh"


class LocalImage(Record):
    """``oci://``, ``oci-archive://`` or ``docker-archive://``: an image in a file or directory."""

    scheme: str
    path: str
    ref: str | None = None

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.path}" + (f":{self.ref}" if self.ref else "")

    def default_output(self, named: str | None = None) -> str:
        """The image file's name: the folder's or archive's, with the image's ``REF``; or after
        ``named``, the name the layout gives its only image (``org.opencontainers.image.ref.name``:
        ``docker.io/library/ubuntu:24.04`` makes ``ubuntu+24.04.sqsh``, as ``docker://ubuntu:24.04``;
        a bare tag ``24.04`` makes ``FOLDER+24.04.sqsh``, as ``oci://FOLDER:24.04``)."""
        base = os.path.basename(self.path.rstrip("/")) or "image"
        base = re.sub(r"\.(tar|tar\.gz|tgz)$", "", base)
        ref = self.ref or named
        if ref and not self.ref and ("/" in ref or ":" in ref):
            name = _file_name_of(ref)
            if name:
                return name + ".sqsh"
        if ref and not _FILE_NAME.fullmatch(ref):
            ref = None  # a name from an untrusted index that makes no file name
        return base + (f"+{ref}" if ref else "") + ".sqsh"


_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")


def _file_name_of(name: str) -> str | None:
    """The file name of a full image name, as its registry image's (``registry.example.com/lab/train:1``:
    ``lab+train+1``, without the digest); None when it makes no file name."""
    try:
        ref = parse(f"docker://{name.partition('@')[0]}")
    except InvalidReference:
        return None
    text = ref.default_output().removesuffix(".sqsh")
    return text if _FILE_NAME.fullmatch(text) else None


ImageReference = RegistryImage | EngineImage | LocalImage


def parse(uri: str, *, path_exists: bool | None = None) -> ImageReference:
    """Parse an image URI.

    ``path_exists`` says whether a local URI's whole path exists; when it does not and the path
    ends in ``:REF``, that suffix selects an image inside (as skopeo's ``oci:DIR:REF``).

    Raises:
        InvalidReference: an unknown scheme or a reference that does not match the grammar.
    """
    scheme, separator, rest = uri.partition("://")
    if not separator or scheme not in SCHEMES:
        raise InvalidReference(
            f"Invalid argument: {uri}",
            hint="image URIs start with " + ", ".join(f"{s}://" for s in SCHEMES),
        )
    if scheme == "docker":
        return parse_docker(rest, uri)
    if scheme in ("dockerd", "podman"):
        if not _ENGINE_IMAGE.fullmatch(rest):
            raise InvalidReference(f"Invalid image reference: {uri}", hint=f"write {scheme}://IMAGE[:TAG], as "
                                                                          f"{'docker' if scheme == 'dockerd' else scheme} "
                                                                          "images names it")
        return EngineImage("docker" if scheme == "dockerd" else "podman", rest)
    if not rest:
        raise InvalidReference(f"Invalid image reference: {uri}", hint=f"write {scheme}://PATH")
    path, colon, ref = rest.rpartition(":")
    if scheme != "docker-archive" and colon and path and "/" not in ref and ref and not path_exists:
        return LocalImage(scheme, path, ref)
    return LocalImage(scheme, rest)


def _check_registry(registry: str, uri: str) -> None:
    """A host name (labels of letters, digits and ``-``) or an IPv4 address, with a port from 1 to
    65535. Raises InvalidReference."""
    host, _, port = registry.partition(":")
    labels = host.split(".")
    valid_host = all(label and len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
                     and all(c.isascii() and (c.isalnum() or c == "-") for c in label) for label in labels)
    if valid_host and all(is_number(label) for label in labels):  # an IPv4 address: four numbers, no leading 0
        valid_host = len(labels) == 4 and all(int(n) <= 255 and (n == "0" or not n.startswith("0")) for n in labels)
    if not valid_host or (port and not (is_number(port) and 0 < int(port) < 65536)):
        raise InvalidReference(f"Invalid image reference: {uri}: {registry!r} is not a registry address",
                               hint="write HOST[:PORT]#IMAGE, e.g. nvcr.io#nvidia/pytorch:24.01-py3")


def parse_docker(text: str, uri: str) -> RegistryImage:
    """Parse what follows ``docker://``. Raises InvalidReference."""
    if "@sha256:" in text and not re.search(r"@sha256:[a-f0-9]{64}$", text):
        raise InvalidReference(f"Invalid image reference: {uri}",
                               hint="a digest is sha256: followed by 64 lower-case hex digits")
    for form in _DOCKER_FORMS:
        match = form.fullmatch(text)
        if match is None:
            continue
        groups = match.groupdict()
        registry, image = groups.get("registry"), groups["image"]
        host = groups.get("host")
        if host is not None:
            if "." in host or ":" in host or host == "localhost":
                registry = host
            else:
                image = f"{host}/{image}"
        registry = registry or DOCKER_HUB
        _check_registry(registry, uri)
        if registry in DOCKER_HUB_ALIASES:
            registry = DOCKER_HUB
            if "/" not in image:
                image = f"library/{image}"
        return RegistryImage(registry, image, groups["tag"], groups.get("digest"), groups["user"])
    if re.search(r"[A-Z]", (text.partition("#")[2] or text).partition(":")[0]):
        hint = "repository names are lower case"
    else:
        hint = ("write docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST], e.g. docker://nvcr.io#nvidia/pytorch:24.01-py3; "
                "a tag is up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'")
    raise InvalidReference(f"Invalid image reference: {uri}", hint=hint)
