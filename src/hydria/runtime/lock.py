"""The per-container setup lock (enroot's rootfs lock): starts of one named container set it up
one at a time, so that two overlay mounts never copy up the same directory at once, and a Slurm
step that waited finds the first one running and joins it. The lock is held from before the root
filesystem is mounted until the container's program is executed (its descriptor is close-on-exec)."""

from __future__ import annotations

import os

from hydria import locks
from hydria.errors import HydriaError

TIMEOUT = 30  # seconds, as enroot's
_held: dict[str, int] = {}  # lock file -> descriptor, so that taking it again in this process is a no-op


def hold(path: str, timeout: float = TIMEOUT) -> None:
    """Take the exclusive lock on ``path`` (created when missing). Raises HydriaError on timeout."""
    if path in _held:
        return
    try:
        fd = locks.take(path, timeout=timeout)
    except OSError as e:
        raise HydriaError(f"Could not acquire rootfs lock: {path}: {e.strerror}",
                          hint="it must be a file of the container's folder: remove what is there") from None
    if fd is None:
        raise HydriaError(f"Could not acquire rootfs lock: {path}",
                          hint=f"another start of this container has been setting it up for {timeout:.0f} s")
    _held[path] = fd


def release(path: str) -> None:
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def release_all() -> None:
    for key in list(_held):
        release(key)
