"""Where a named container lives in ``$HYDRIA_DATA_PATH``, found without ``pathlib``: starts
look containers up here; store.py creates, lists and removes them (see docs/runtime.md, start
latency)."""

from __future__ import annotations

import os

from hydria.errors import HydriaError
from hydria.runtime.rootfs import Container

IMAGE = "image.sqsh"  # the container's reference to its image (a hardlink or a copy)
ROOTFS = "rootfs"  # an unpacked container's root filesystem
NAME_MAX = 255


def validate_name(name: str) -> str:
    """Raises HydriaError for names that cannot be a container (empty, ``/``, ``.``, overlong,
    not UTF-8, or with control characters, which would garble ``list``)."""
    encoded = name.encode(errors="surrogateescape")
    if not name or "/" in name or name in (".", "..") or len(encoded) > NAME_MAX or \
            any(ord(c) < 32 or c == "\x7f" or "\udc80" <= c <= "\udcff" for c in name):
        raise HydriaError(f"Invalid argument: {name if name.isprintable() else ascii(name)}",
                          hint="a container name is a single path component of UTF-8 text: no '/', not '.' "
                               f"or '..', no control characters, at most {NAME_MAX} bytes")
    return name


def container_path(data_path: str, name: str) -> str:
    return os.path.join(data_path, validate_name(name))


def find(data_path: str, name: str) -> Container:
    """Raises HydriaError when there is no such container."""
    path = container_path(data_path, name)
    if os.path.isfile(os.path.join(path, IMAGE)):
        return Container(name, os.path.join(path, IMAGE), home=path)
    if os.path.isdir(os.path.join(path, ROOTFS)):
        return Container(name, None, home=path, directory=os.path.join(path, ROOTFS))
    raise HydriaError(f"No such file or directory: {path}",
                      hint=f"create it first: hydria create --name {name} IMAGE")
