"""Freeing space in the image store and in a user's cache: the least recently used files first,
never one that a container of this node has mounted, nor one used within a grace period (an
import that is about to read it, a step on another node that found it and mounts it next).

How recently a file was used is its access time, which Linux's default ``relatime`` updates at
most once a day (a kept image's use sets it: hydria/image/kept/user_cache.py). On a file system
mounted ``noatime`` only creation counts.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from hydria.digits import is_number
from hydria.record import Record
from hydria.runtime.reader import FALLBACK, READER


class Item(Record):
    path: Path
    size: int
    last_used: float


def item(path: Path, info: os.stat_result) -> Item:
    """``path`` as a candidate, last used when it was last read or written."""
    return Item(path, info.st_size, max(info.st_atime, info.st_mtime))


def regular_files(paths: Iterable[Path], owner: int | None = None) -> list[tuple[Path, os.stat_result]]:
    """The regular files among ``paths`` (of ``owner`` when given), with their lstat."""
    found = []
    for path in paths:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode) and (owner is None or info.st_uid == owner):
            found.append((path, info))
    return found


SERVERS = frozenset({os.fsencode(FALLBACK), os.fsencode(READER)})  # the programs that serve images


def mounted_images() -> set[str]:
    """The files that the image daemons of this node serve (hydria's reader, squashfuse: their
    command lines name them), links resolved. Command lines are readable by every user, unless
    /proc is mounted hidepid."""
    found: set[str] = set()
    for entry in os.listdir("/proc"):
        if not is_number(entry):
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) in SERVERS:
            found.update(os.path.realpath(os.fsdecode(arg)) for arg in argv[1:] if arg.startswith(b"/"))
    return found


def victims(items: Iterable[Item], target: int, grace: float,
            mounted: Callable[[], set[str]] = mounted_images) -> list[Item]:
    """The least recently used ``items`` to remove for their total to reach ``target`` bytes (or
    as near as the others allow): none mounted here, none used in the last ``grace`` seconds."""
    items = sorted(items, key=lambda i: i.last_used)
    total = sum(i.size for i in items)
    if total <= target:
        return []
    in_use = mounted()
    now = time.time()
    chosen = []
    for candidate in items:
        if total <= target:
            break
        if now - candidate.last_used < grace or os.path.realpath(candidate.path) in in_use:
            continue
        chosen.append(candidate)
        total -= candidate.size
    return chosen


def remove(chosen: Iterable[Item]) -> int:
    """Remove the files (another process may have removed one first); the bytes freed."""
    freed = 0
    for candidate in chosen:
        try:
            candidate.path.unlink()
            freed += candidate.size
        except FileNotFoundError:
            continue
    return freed
