"""Kept images: what an import keeps so that the next import of the same image, or of an image
that shares its layers, costs only what is new. One concept with two homes:

* a user's cache (:class:`hydria.image.kept.user_cache.ImageCache`, ``CACHE/images.UID``): trusted
  because it is the user's own folder and files, guarded by flock;
* the cluster's image store (:class:`hydria.image.kept.store.ImageStore`, ``STORE/images``):
  written by one account and trusted by every user for that, guarded by a link lock that holds
  on NFS (hydria/locks.py).

The words, each meaning this everywhere (docs/architecture.md's glossary):

* **image file**: one squashfs file that holds a whole root file system (``NAME.sqsh``);
* **layer image**: the squashfs of one layer blob (``layer-KEY.sqsh``), keyed by the blob's
  digest, the squash options and ``LAYER_FORMAT`` (:func:`layer_key`), so that every image of a
  home that has the layer shares it;
* **layered image**: a small file that names layer images, the lowest first (``KEY.layers``,
  hydria/runtime/layered.py);
* **kept image**: an image file or a layered image in a home (not its layer images), found by a
  key of everything its bytes depend on.

What the two homes share is here: the names, the key of a layer image, which layer images the
kept images name, what each weighs and which are in use; what differs (who is trusted, how they
lock, how an entry is named) is in each home's module, behind :class:`KeptImages`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from hydria.anonfile import AnonymousFile
from hydria.image.kept.prune import Item, item, regular_files
from hydria.record import Record
from hydria.runtime.layered import MAX_SIZE, LayeredImageError, layer_names
from hydria.version import __version__

IMAGE_FORMAT = "2"  # change it when an import writes other bytes for the same inputs
LAYER_FORMAT = "1"  # the same for a layer image (image/squash/layer_image.py)
LAYER_PREFIX = "layer-"
LAYER_SUFFIX = ".sqsh"
LAYERED_SUFFIX = ".layers"
IMAGE_SUFFIX = ".sqsh"
SOURCE_XATTR = "user.hydria.source"  # on a kept image of the user's cache: "URI\nMANIFEST_DIGEST"


class KeptImage(Record):
    """A kept image as ``cache list`` and ``store list`` show it."""

    key: str
    path: Path
    size: int  # its file's bytes and those of every layer image it names
    uri: str  # "" where the home has no record of it (kept by an older hydria, a file system without xattrs)
    digest: str  # the manifest's
    created: float
    used: float  # its access time: when an import last found it


class KeptImages(Protocol):
    """A home of kept images: what an import, a listing and a prune ask of either."""

    def layer(self, blob_digest: str, squash_options: str) -> str | None:
        """The name of the kept layer image of ``blob_digest``, when there is one whole."""

    def add_layer(self, blob_digest: str, squash_options: str, write: Callable[[AnonymousFile], None]) -> str:
        """Keep the layer image that ``write`` writes into the anonymous file it is given (or the
        one a concurrent import kept first); its name."""

    def layer_file(self, name: str) -> Path:
        """The path of the layer image ``name``."""

    def kept_images(self) -> list[Path]:
        """The kept images: image files and layered images (not their layer images)."""

    def layered_in_use(self, mounted: set[str]) -> set[str]:
        """The layered images (real paths) whose layer images are all among the ``mounted`` files."""

    def collect_layers(self) -> None:
        """Remove the layer images that no kept image names (and that no import may be about to name)."""

    def listing(self) -> list[KeptImage]:
        """The kept images with what each is, the most recently used first."""


def layer_key(blob_digest: str, squash_options: str) -> str:
    """A layer image's key: what its bytes depend on (the blob's digest, verified at download)."""
    text = f"{LAYER_FORMAT}\n{__version__}\n{blob_digest}\n{squash_options}"
    return LAYER_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def kept_image_files(folder: Path) -> list[Path]:
    """The kept images in ``folder``: image files and layered images, not layer images nor the
    hidden files of imports under way."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [folder / name for name in names if not name.startswith(".") and not is_layer_image(name)
            and name.endswith((IMAGE_SUFFIX, LAYERED_SUFFIX))]


def unnamed_layers(folder: Path, kept: list[Path]) -> list[Path]:
    """The layer images in ``folder`` that none of the kept images ``kept`` names."""
    return [folder / name for name, users in layer_users(folder, kept).items() if not users]


def is_layer_image(name: str) -> bool:
    return name.startswith(LAYER_PREFIX) and name.endswith(LAYER_SUFFIX)


def names_in(layered: Path) -> list[str]:
    """The layer images that the layered image ``layered`` names (none when it cannot be read).
    Read without marking a use (its access time is when an import last used it: pruning)."""
    try:
        fd = os.open(layered, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOATIME)
    except PermissionError:  # O_NOATIME on a file of another user (root reading the store)
        try:
            fd = os.open(layered, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return []
    except OSError:
        return []
    try:
        with os.fdopen(fd, "rb") as handle:
            return layer_names(handle.read(MAX_SIZE + 1))
    except (OSError, LayeredImageError):
        return []


def layer_users(folder: Path, entries: list[Path]) -> dict[str, list[Path]]:
    """Each layer image in ``folder`` (and each that ``entries`` name), with the layered images
    among ``entries`` that name it (none: nobody needs it)."""
    users: dict[str, list[Path]] = {}
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return users
    for name in names:
        if is_layer_image(name):
            users.setdefault(name, [])
    for path in entries:
        if path.name.endswith(LAYERED_SUFFIX):
            for layer in set(names_in(path)):  # an image may name one layer image twice
                users.setdefault(layer, []).append(path)
    return users


def layered_in_use(folder: Path, entries: list[Path], mounted: set[str]) -> set[str]:
    """The layered images among ``entries`` (real paths) whose layer images are all ``mounted``:
    a start mounts every layer image of its image. One that shares some of its layer images
    with a running container's image is not in use: removing it leaves those to the other."""
    found = set()
    for path in entries:
        if path.name.endswith(LAYERED_SUFFIX):
            names = names_in(path)
            if names and all(os.path.realpath(folder / name) in mounted for name in names):
                found.add(os.path.realpath(path))
    return found


def weigh(folder: Path, entries: list[Path], owner: int | None) -> tuple[list[Item], int]:
    """``entries`` (image files and layered images of ``owner``, any owner when None) as a prune
    weighs them: a layered image with the layer images that it alone names. Also the bytes of
    the layer images that several name (they are no candidate: they go with the last of them)."""
    users = layer_users(folder, entries)
    sizes = {path.name: info.st_size for path, info in regular_files([folder / name for name in users], owner)}
    shared = sum(size for name, size in sizes.items() if len(users[name]) > 1)
    own: dict[Path, int] = {}
    for name, paths in users.items():
        if len(paths) == 1:
            own[paths[0]] = own.get(paths[0], 0) + sizes.get(name, 0)
    return [item(path, info)._replace(size=info.st_size + own.get(path, 0))
            for path, info in regular_files(entries, owner)], shared


def with_layers_size(folder: Path, path: Path, info: os.stat_result) -> int:
    """The bytes a kept image reads: its file's, and those of every layer image it names."""
    if not path.name.endswith(LAYERED_SUFFIX):
        return info.st_size
    layers = regular_files([folder / name for name in set(names_in(path))])
    return info.st_size + sum(layer.st_size for _, layer in layers)


def mark_source(target: int | Path, uri: str, digest: str) -> None:
    """Record on a kept image (a descriptor or a path) which image it is, for ``cache list``;
    where the file system keeps no extended attributes it goes unrecorded."""
    try:
        os.setxattr(target, SOURCE_XATTR, f"{uri}\n{digest}".encode())
    except OSError:
        pass


def source_of(path: Path) -> tuple[str, str]:
    """The URI and manifest digest :func:`mark_source` recorded on ``path`` (empty when none)."""
    try:
        uri, _, digest = os.getxattr(path, SOURCE_XATTR, follow_symlinks=False).decode(errors="replace").partition("\n")
    except OSError:
        return "", ""
    return uri, digest


def most_recent_first(images: list[KeptImage]) -> list[KeptImage]:
    return sorted(images, key=lambda image: image.used, reverse=True)
