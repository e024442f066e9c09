"""What an image has in ``/var/run`` and ``/var/lock``, kept on the tmpfs that a start mounts there.

The system fstab gives those folders tmpfs mounts of the container's own, as enroot's does, so that
pid files, sockets and locks work on a read-only root. A bare tmpfs would hide what the image put
there: Dockerfiles make ``/run/sshd`` (``mkdir -p /var/run/sshd``) at build time, and sshd then
refuses to start (``Missing privilege separation directory``). So the image's folders, links and
small files there are copied onto the new tmpfs (enroot hides them; Docker and podman mount no
tmpfs there). Bounded, since an image's own could otherwise fill the start.
"""

from __future__ import annotations

import os
import stat

from hydria.errors import HydriaError
from hydria.record import Record
from hydria.runtime.mounts import resolve_in_root

FOLDERS = ("/var/run", "/var/lock")  # the system fstab (container/start.py) mounts a tmpfs on each
KEPT_ENTRIES, KEPT_FILE_SIZE = 256, 1 << 16


class Entry(Record):
    path: str  # relative to its folder
    mode: int
    link: str | None = None  # a symbolic link's text
    content: bytes | None = None  # a plain file's


def image_contents(root: str) -> dict[str, list[Entry]]:
    """Each of ``FOLDERS`` with what the image has in it (inside ``root``), parents first."""
    return {folder: _entries(root, folder) for folder in FOLDERS}


def restore(root: str, kept: dict[str, list[Entry]]) -> None:
    """Make ``kept`` again in each folder (a tmpfs by now), leaving what is there already."""
    for folder, entries in kept.items():
        try:
            top = resolve_in_root(root, folder)
        except HydriaError:
            continue
        for entry in entries:
            path = os.path.join(top, entry.path)
            try:
                if entry.link is not None:
                    os.symlink(entry.link, path)
                elif entry.content is None:
                    os.mkdir(path, entry.mode)
                else:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, entry.mode)
                    with open(fd, "wb") as handle:
                        handle.write(entry.content)
            except OSError:
                continue  # there already (a mount point), or under a folder that could not be made


def _entries(root: str, folder: str) -> list[Entry]:
    try:
        top = resolve_in_root(root, folder)
    except HydriaError:
        return []
    if not os.path.isdir(top):
        return []
    entries: list[Entry] = []
    for directory, folders, files in os.walk(top):  # a link to a folder is listed, not entered
        for name in sorted(folders) + sorted(files):
            if len(entries) >= KEPT_ENTRIES:
                return entries
            entry = _entry(os.path.join(directory, name), top)
            if entry is not None:
                entries.append(entry)
    return entries


def _entry(path: str, top: str) -> Entry | None:
    relative = os.path.relpath(path, top)
    try:
        info = os.lstat(path)
        mode = stat.S_IMODE(info.st_mode) & 0o1777  # no set-ID bits
        if stat.S_ISDIR(info.st_mode):
            return Entry(relative, mode)
        if stat.S_ISLNK(info.st_mode):
            return Entry(relative, mode, link=os.readlink(path))
        if stat.S_ISREG(info.st_mode) and info.st_size <= KEPT_FILE_SIZE:
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as handle:
                return Entry(relative, mode, content=handle.read(KEPT_FILE_SIZE))
    except OSError:
        pass
    return None  # a socket, a FIFO, a device, a large file
