"""This user's other mount namespaces, read from ``/proc``, and what their mounts use: which
overlay work directories and unpacked images are in use (runtime/rootfs.py,
container/read_cache.py), which container each runs (container/running.py)."""

from __future__ import annotations

import os

from hydria.digits import is_number
from hydria.record import TYPE_CHECKING
from hydria.runtime.fstab import unescape

if TYPE_CHECKING:
    from collections.abc import Iterable

FUSE_OVERLAY = "fuse.fuse-overlayfs"


def other_namespaces() -> Iterable[tuple[int, str]]:
    """(lowest PID, mount namespace) of each mount namespace of this user other than ours."""
    ours = link("self", "ns/mnt")
    uid = os.getuid()
    seen: set[str] = set()
    for entry in sorted(int(e) for e in os.listdir("/proc") if is_number(e)):
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        namespace = link(entry, "ns/mnt")
        if namespace and namespace != ours and namespace not in seen:
            seen.add(namespace)
            yield entry, namespace


def workdirs_in_use() -> set[str]:
    """The overlay work directories that mounts of this user's other mount namespaces use."""
    return options_in_use("workdir")


def options_in_use(name: str) -> set[str]:
    """The values of the option ``name`` (an overlay's ``workdir``, ``lowerdir``) of the mounts
    of this user's other mount namespaces."""
    found = set()
    for pid, _ in other_namespaces():
        try:
            with open(f"/proc/{pid}/mountinfo") as handle:
                text = handle.read()
        except OSError:
            continue
        for line in text.splitlines():
            for option in own_options(line):
                if option.startswith(f"{name}="):
                    found.add(unescape(option.removeprefix(f"{name}=")))
    return found


def own_options(line: str) -> list[str]:
    """A mountinfo line's last field, the file system's own options (an overlay's upperdir, ...),
    and for a fuse-overlayfs mount its source, where hydria writes the same (runtime/rootfs.py)."""
    fstype, source, options = (line.split(" - ", 1)[-1].split(" ") + ["", "", ""])[:3]
    return [*options.split(","), *(source.split(",") if fstype == FUSE_OVERLAY else ())]


def link(pid: int | str, name: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None
