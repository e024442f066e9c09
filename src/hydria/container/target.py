"""What a start's target names: an image file, or a container in the data path."""

from __future__ import annotations

import os

from hydria.config import Settings
from hydria.container import named
from hydria.errors import HydriaError, InvalidArgument
from hydria.runtime import rootfs

IMAGE_SUFFIXES = (".sqsh", ".squashfs", ".sqfs", ".img")


def resolve_target(target: str, settings: Settings) -> rootfs.Container:
    """An image file, or the name of a container in the data path. Raises HydriaError, saying
    what is wrong with the file where the target names one (a path, a file here, an image suffix)."""
    if not target:
        raise InvalidArgument()
    if "/" in target or os.path.isfile(target):
        try:
            rootfs.check_image(target)  # one read: squashfs, and not truncated
            return rootfs.Container(os.path.basename(target), os.path.realpath(target))
        except rootfs.NotSquashfs:
            if "/" in target:
                raise  # a path: no container name; a file here may share its name with one
    try:
        container = named.find(settings.data_path, target)
    except HydriaError:
        if not (os.path.lexists(target) or target.endswith(IMAGE_SUFFIXES)):
            raise
        try:
            rootfs.check_image(target)  # a file meant, not a container: say what is wrong with it
        except HydriaError as e:
            nor = f"nor is there a container named {target} (hydria list)"
            raise HydriaError(e.message, hint=f"{e.hint}; {nor}" if e.hint else nor) from None
        raise
    named.check_unchanged(container)
    return container
