"""Where a named container lives in ``$HYDRIA_DATA_PATH``, found without ``pathlib``: starts
look containers up here; named_containers.py creates, lists and removes them (see docs/runtime.md, start
latency)."""

from __future__ import annotations

import os

from hydria.errors import ContainerNotFound, HydriaError, InvalidArgument, did_you_mean
from hydria.paths import NAME_MAX
from hydria.runtime.rootfs import Container, check_image

IMAGE = "image.sqsh"  # the container's reference to its image (a hardlink or a copy)
ROOTFS = "rootfs"  # an unpacked container's root filesystem
IDENTITY = "image.id"  # what the image was at create (rootfs.check_image): a hardlink shares later writes


def validate_name(name: str) -> str:
    """Raises HydriaError for names that cannot be a container (empty, ``/``, ``.``, overlong,
    not UTF-8, or with control characters, which would garble ``list``)."""
    encoded = name.encode(errors="surrogateescape")
    if not name or "/" in name or name in (".", "..") or len(encoded) > NAME_MAX or \
            any(ord(c) < 32 or c == "\x7f" or "\udc80" <= c <= "\udcff" for c in name):
        raise InvalidArgument(name if name.isprintable() else ascii(name),
                              hint="a container name is a single path component of UTF-8 text: no '/', not '.' "
                                   f"or '..', no control characters, at most {NAME_MAX} bytes")
    return name


def container_path(data_path: str, name: str) -> str:
    return os.path.join(data_path, validate_name(name))


def find(data_path: str, name: str) -> Container:
    """Raises HydriaError when there is no such container."""
    path = container_path(data_path, name)
    image = os.path.join(path, IMAGE)
    if os.path.isfile(image):
        return Container(name, image, home=path)
    if os.path.isdir(os.path.join(path, ROOTFS)):
        return Container(name, None, home=path, directory=os.path.join(path, ROOTFS))
    raise missing(data_path, name)


def container_names(data_path: str) -> list[str]:
    """The containers in ``data_path``, sorted: its entries but the hidden ones (creates and
    removals under way, the shared copies of image files). Raises OSError."""
    return sorted(entry for entry in os.listdir(data_path) if not entry.startswith("."))


def missing(data_path: str, name: str) -> ContainerNotFound:
    """The error for ``name``, which is no container: with the containers there are, or the one
    that was probably meant."""
    try:
        names = container_names(data_path)
    except OSError:
        names = []
    if not names:
        return ContainerNotFound(name, hint=f"you have no containers: create it first: hydria create --name {name} IMAGE")
    meant = did_you_mean(name, names, "hydria list shows your containers")
    if meant:
        return ContainerNotFound(name, hint=meant)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return ContainerNotFound(name, hint=f"your containers: {shown} (create it: hydria create --name {name} IMAGE)")


def check_unchanged(container: Container) -> None:
    """Refuse a container whose image file was rewritten since ``create`` (``cp other.sqsh
    mine.sqsh`` writes into the inode the container's hardlink shares): its writes were made on
    the old image. Containers made before identities were recorded have none to compare."""
    if container.image is None or container.home is None:
        return
    try:
        with open(os.path.join(container.home, IDENTITY)) as handle:
            recorded: str | None = handle.read().strip()
    except FileNotFoundError:
        recorded = None
    try:
        current = check_image(container.image)
    except HydriaError as e:
        raise HydriaError(f"container {container.name}: {e.message}",
                          hint=_RECREATE.format(name=container.name)) from None
    if recorded is not None and current != recorded:
        size = current.split(" ", 1)[0]
        raise HydriaError(f"container {container.name}: its image {container.image} changed since the container "
                          f"was created (now {size} bytes): the file it was created from was rewritten in place",
                          hint=_RECREATE.format(name=container.name))


_RECREATE = ("restore the image file, or create the container again (its writes are lost): "
             "hydria create --force --name {name} IMAGE")
