"""The per-container setup lock (enroot's rootfs lock): starts of one named container set it up
one at a time, so that two overlay mounts never copy up the same directory at once, and a Slurm
step that waited finds the first one running and joins it. The lock is held from before the root
filesystem is mounted until the container's program is executed (its descriptor is close-on-exec)."""

from __future__ import annotations

import fcntl
import os
import time

from hydria.errors import HydriaError

TIMEOUT = 30  # seconds, as enroot's
_held: dict[str, int] = {}  # lock file -> descriptor, so that taking it again in this process is a no-op


def hold(path: str, timeout: float = TIMEOUT) -> None:
    """Take the exclusive lock on ``path`` (created when missing). Raises HydriaError on timeout."""
    if path in _held:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise HydriaError(f"Could not acquire rootfs lock: {path}",
                                  hint=f"another start of this container has been setting it up for {timeout:.0f} s") from None
            time.sleep(0.02)
    _held[path] = fd


def release(path: str) -> None:
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def release_all() -> None:
    for key in list(_held):
        release(key)
