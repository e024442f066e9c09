"""What a blob cache directory is, for the importer and for ``doctor``: this user's private cache,
a cache shared by the users of a node or cluster, or a layout that cannot work for everyone.

The one layout documented for sharing (docs/import.md) is a sticky directory that other users
can write — mode 1777 like ``/tmp``, or 1770 (3770) for one group — with its ``blobs``,
``blobs/sha256`` and ``locks`` folders made the same way by the administrator. Any other
directory of another user is refused with the fix, because it would work for its first user only
(their 0700 folders lock everyone else out) or would let any user replace another's folders (a
directory others can write that is not sticky).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from hydria.paths import user_name

SUBFOLDERS = (("blobs",), ("blobs", "sha256"), ("locks",))
GUIDE = "docs/import.md, 'Sharing a cache between users'"


@dataclass(frozen=True)
class CacheLayout:
    root: Path
    shared: bool = False
    folder_mode: int = 0o700  # of the folders hydria makes inside
    problem: str | None = None  # why nobody but its owner could use it: the import refuses it
    hint: str = ""
    unusable: list[str] = field(default_factory=list)  # folders of a shared cache this user cannot write

    def describe(self) -> str:
        if not self.root.is_dir():
            return f"{self.root} (will be created, private)"
        info = self.root.stat()
        kind = "shared" if self.shared else "private"
        return f"{self.root} ({kind}: mode {stat.S_IMODE(info.st_mode):04o}, owner {user_name(info.st_uid)})"


def inspect(root: str | Path) -> CacheLayout:
    """The layout of the cache directory ``root`` (following a link there, as the admin meant)."""
    root = Path(root)
    try:
        info = root.stat()
    except FileNotFoundError:
        return CacheLayout(root)  # made 0700 for this user
    except OSError as e:
        return CacheLayout(root, problem=f"{root} (HYDRIA_CACHE_PATH): {e.strerror}",
                           hint="set HYDRIA_CACHE_PATH to a directory you can use")
    if not stat.S_ISDIR(info.st_mode):
        return CacheLayout(root, problem=f"{root} (HYDRIA_CACHE_PATH) is not a directory",
                           hint="remove it or set HYDRIA_CACHE_PATH elsewhere")
    mode = stat.S_IMODE(info.st_mode)
    others_write = mode & (stat.S_IWGRP | stat.S_IWOTH)
    if others_write and mode & stat.S_ISVTX:
        if not os.access(root, os.W_OK | os.X_OK):
            return CacheLayout(root, problem=f"{root} (HYDRIA_CACHE_PATH) is shared by the group {_group(info.st_gid)}, "
                                             f"and you are not in it (mode {mode:04o})",
                               hint="ask the administrator to add you to that group, "
                                    "or set HYDRIA_CACHE_PATH to a directory of your own")
        return CacheLayout(root, True, mode & 0o3777, unusable=_unusable_folders(root))
    if info.st_uid == os.geteuid():
        return CacheLayout(root)
    owner = user_name(info.st_uid)
    if others_write:
        return CacheLayout(root, problem=f"{root} (HYDRIA_CACHE_PATH, owner {owner}) is writable by other users but "
                                         f"not sticky (mode {mode:04o}): any of them could replace its folders",
                           hint=f"the administrator makes it sticky: chmod +t {root} ({GUIDE}); "
                                "or set HYDRIA_CACHE_PATH to a directory of your own")
    return CacheLayout(root, problem=f"{root} (HYDRIA_CACHE_PATH) belongs to {owner} (mode {mode:04o}), "
                                     "and other users cannot write it",
                       hint=f"set HYDRIA_CACHE_PATH to a directory of your own; for a cache shared by users, "
                            f"the administrator makes it sticky and writable: chmod 1777 {root} ({GUIDE})")


def _group(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _unusable_folders(root: Path) -> list[str]:
    """The folders of a shared cache, among those there already, that this user cannot add to
    (another user made them without the shared mode, or they are not directories)."""
    found = []
    for parts in SUBFOLDERS:
        path = root.joinpath(*parts)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError:
            found.append(str(path))
            continue
        if not stat.S_ISDIR(info.st_mode) or not os.access(path, os.W_OK | os.X_OK):
            found.append(str(path))
    return found
