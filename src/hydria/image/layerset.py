"""A folder of layered images and the layer images they name (a user's kept images, the image
store's): which images need each layer image, and what each image weighs when layers are
shared, for listing and pruning. A layer image that several images name counts once and goes
with the last of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydria.image.prune import Item, item, regular_files
from hydria.runtime.layered import MAX_SIZE, LayeredImageError, layer_names

LAYER_PREFIX = "layer-"
LAYER_SUFFIX = ".sqsh"
LAYERED_SUFFIX = ".layers"


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
