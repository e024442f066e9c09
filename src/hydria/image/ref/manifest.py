"""Manifests, indexes and platforms (OCI and Docker schema 2). Pure parsing and choosing."""

from __future__ import annotations

import json
import platform as host_platform
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from hydria.errors import HydriaError
from hydria.record import Record

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_ANNOTATION = "org.opencontainers.image.ref.name"  # an image's name in an OCI layout's index
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))

# `uname -m` and Docker's names to the architecture names images use (as enroot maps them).
_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                  "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "armv7l": "arm",
                  "arm": "arm", "i386": "386", "i686": "386", "386": "386"}


class ManifestError(HydriaError):
    """A manifest or index that cannot be used."""


class Platform(Record):
    architecture: str
    os: str = "linux"
    variant: str | None = None
    asked: bool = False  # named with --arch, not this machine's by default

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    def key_part(self) -> str:
        """What the platform adds to the key of a kept or stored image: what --arch asked for (an
        image of one architecture is refused when it is another, so the same manifest digest can
        give an image or an error); nothing when not asked, as keys were before."""
        return f"\nplatform {self}" if self.asked else ""


def parse_platform(text: str | None) -> Platform:
    """``--arch`` (``amd64``, ``x86_64``, ``arm64/v8``, ...) or this machine when None.

    Raises:
        ManifestError: an architecture hydria does not know.
    """
    name, _, variant = (text or host_platform.machine()).partition("/")
    if name not in _ARCHITECTURES:
        raise ManifestError(f"Unsupported architecture: {text or name}",
                            hint="use one of " + ", ".join(sorted(set(_ARCHITECTURES.values()))))
    return Platform(_ARCHITECTURES[name], variant=variant or None, asked=text is not None)


class Descriptor(Record):
    digest: str
    size: int
    media_type: str
    platform: Platform | None = None


class Manifest(Record):
    config: Descriptor
    layers: tuple[Descriptor, ...]  # base layer first


def load_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ManifestError(f"Could not parse {where}: not valid JSON") from None


def check_config(document: Any, where: str) -> dict[str, Any]:
    """An image config document, which must be a JSON object. Raises ManifestError."""
    if not isinstance(document, dict):
        raise ManifestError(f"Invalid image format: {where} is not a JSON object",
                            hint="the image was built wrongly or crafted; nothing was written")
    return document


def media_type_of(document: Any, header: str | None = None) -> str:
    """A manifest's media type: its own field, else the HTTP header, else guessed from its shape."""
    if isinstance(document, dict) and isinstance(document.get("mediaType"), str):
        return str(document["mediaType"])
    if header and header.split(";")[0].strip() not in ("", "application/json", "text/plain"):
        return header.split(";")[0].strip()
    if isinstance(document, dict) and "manifests" in document:
        return OCI_INDEX
    if isinstance(document, dict) and document.get("schemaVersion") == 1:
        return DOCKER_SCHEMA1[0]
    return OCI_MANIFEST


def _descriptor(item: Any, where: str) -> Descriptor:
    try:
        platform = item.get("platform")
        return Descriptor(
            str(item["digest"]), int(item.get("size", -1)), str(item.get("mediaType", "")),
            Platform(str(platform["architecture"]), str(platform.get("os", "linux")), platform.get("variant"))
            if isinstance(platform, dict) and "architecture" in platform else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ManifestError(f"Could not parse digest information from {where}") from None


def parse_manifest(document: Any, media_type: str, where: str) -> Manifest:
    """Raises ManifestError for schema 1 and for manifests without config or layers."""
    if media_type in DOCKER_SCHEMA1:
        raise ManifestError(f"{where} is a Docker schema 1 manifest, which is not supported",
                            hint="push the image again with a current Docker, Podman or skopeo")
    if not isinstance(document, dict) or not isinstance(document.get("layers"), list) \
            or not document["layers"] or "config" not in document:
        raise ManifestError(f"Could not parse digest information from {where}")
    return Manifest(_descriptor(document["config"], where),
                    tuple(_descriptor(layer, where) for layer in document["layers"]))


def parse_index(document: Any, where: str) -> list[Descriptor]:
    if not isinstance(document, dict) or not isinstance(document.get("manifests"), list):
        raise ManifestError(f"Could not parse the image index {where}")
    return [_descriptor(item, where) for item in document["manifests"]]


def choose_platform(entries: Sequence[Descriptor], want: Platform, where: str) -> Descriptor:
    """The entry for ``want``: same OS and architecture, and the variant when one is asked for
    (an entry without a variant matches, and arm64 entries without one count as v8).

    Raises:
        ManifestError: no entry matches; the message lists what the index has.
    """
    candidates = [e for e in entries if e.platform and e.platform.os == want.os
                  and e.platform.architecture == want.architecture]
    if want.variant:
        candidates = [e for e in candidates if e.platform and
                      (e.platform.variant or ("v8" if want.architecture == "arm64" else None)) in (want.variant, None)]
    if candidates:
        return candidates[0]
    available = ", ".join(str(e.platform) for e in entries if e.platform) or "none"
    raise ManifestError(f"{where} has no image for {want} (available: {available})",
                        hint="choose one of those with --arch")


def _nothing() -> None:
    pass


class Blob(Protocol):
    """How a blob is read: a cache or archive file, or a reader that verifies or follows one."""

    def read(self, size: int = -1, /) -> bytes: ...

    def readinto(self, buffer: memoryview, /) -> int: ...


class ResolvedImage(Record):
    """What a source found: the image config, its layers, and how to read each layer's blob.

    ``digest``: the registry's manifest digest (None for local sources), which pins the content.
    ``fetch_layers``: start getting the layers (a registry downloads those its cache lacks);
    called once the image is known to be needed.
    """

    uri: str
    config: dict[str, Any]
    layers: tuple[Descriptor, ...]
    open_blob: Callable[[Descriptor], AbstractContextManager[Blob]]
    digest: str | None = None
    fetch_layers: Callable[[], None] = _nothing
