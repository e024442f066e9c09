"""Performing fstab entries inside a container's root, in its mount namespace.

Targets are resolved inside the root: ``..`` and symlinks (absolute ones relative to the root)
can never lead out of it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from hydria.errors import HydriaError
from hydria.log import Logger
from hydria.runtime import syscalls as sc
from hydria.runtime.fstab import MountEntry

log = Logger(__name__)
_LOCKED = sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC | sc.MS_NOATIME | sc.MS_NODIRATIME | sc.MS_RELATIME


class MountFailed(HydriaError):
    pass


def resolve_in_root(root: str, path: str) -> str:
    """The host path of ``path`` inside ``root``, following symlinks without leaving ``root``
    (a symlink's ``..`` stops at the root, as in a chroot).

    Raises:
        MountFailed: a literal ``..`` that climbs above the root, or a symlink loop.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            elif not hops:  # a literal ../ above the root, not one found in a symlink
                raise MountFailed(f"failed to resolve path: {path}: it leads outside the container's root")
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise MountFailed(f"failed to resolve path: {path}: too many levels of symbolic links")
            link = os.readlink(candidate)
            if link.startswith("/"):
                resolved = []
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def link_in_root(root: str, path: str, target: str, origin: str) -> None:
    """Make ``path`` inside ``root`` a symlink to ``target``, replacing what is there (a link an
    earlier start of a named container left in its upper directory): only the directory is
    resolved, so that link is replaced, not followed to what it points at.

    Raises:
        MountFailed: the link cannot be made; ``origin`` names who wanted it.
    """
    link = os.path.join(resolve_in_root(root, os.path.dirname(path)), os.path.basename(path))
    try:
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
    except OSError as e:
        raise MountFailed(f"cannot link {path} to {target} in the container: {e.strerror}",
                          hint=f"from {origin}") from None


def mount_entries(entries: Sequence[MountEntry], root: str, passno: int, cwd: str) -> None:
    """Mount the entries of pass ``passno``, in order. Raises MountFailed unless ``nofail``."""
    for entry in entries:
        if entry.passno != passno:
            continue
        try:
            mount_entry(entry, root, cwd)
        except (OSError, MountFailed) as e:
            message = e.message if isinstance(e, MountFailed) else f"failed to mount: {entry.source} at {entry.target}: {e.strerror}"
            if "nofail" not in entry.options:
                raise MountFailed(message, hint=f"from {entry.origin}" if entry.origin else None) from None
            if "silent" not in entry.options or "loud" in entry.options:
                log.warning("%s", message)


def mount_entry(entry: MountEntry, root: str, cwd: str) -> None:
    target = resolve_in_root(root, entry.target)
    if entry.option_value("x-detach") is not None:
        if os.path.ismount(target):
            sc.umount2(target, sc.MNT_DETACH)
        return
    source = entry.source
    if entry.is_bind or entry.option_value("x-move") is not None:
        source = os.path.normpath(os.path.join(cwd, source))
        if not os.path.exists(source):
            raise MountFailed(f"failed to mount: {entry.source} at {entry.target}: No such file or directory")
    create = entry.option_value("x-create")
    if create is not None:
        _create(target, create, source if entry.is_bind else None)
    if entry.option_value("x-move") is not None:
        sc.mount(source, target, None, sc.MS_MOVE)
        return
    flags, propagation, data, recursive = entry.split_options()
    if entry.is_bind:
        sc.mount(source, target, None, sc.MS_BIND | (sc.MS_REC if recursive else 0))
        extra = flags & ~(sc.MS_BIND | sc.MS_REC | sc.MS_REMOUNT | sc.MS_SILENT)
        if extra or "rw" in entry.options:
            locked = os.statvfs(target).f_flag & _LOCKED
            if "rw" in entry.options:
                locked &= ~sc.MS_RDONLY
            sc.mount(None, target, None, sc.MS_REMOUNT | sc.MS_BIND | locked | extra)
    else:
        sc.mount(source, target, entry.fstype, flags & ~sc.MS_REC, data or None)
    if propagation:
        sc.mount(None, target, None, propagation)


def _create(target: str, kind: str, source: str | None) -> None:
    if kind == "auto":
        kind = "file" if source and not os.path.isdir(source) else "dir"
    try:  # a new mount point gets mode 0000, as enroot's do: export leaves such placeholders out
        if kind == "dir":
            if not os.path.isdir(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.mkdir(target, 0)
        elif not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0))
        elif stat.S_ISDIR(os.stat(target).st_mode):
            raise MountFailed(f"failed to create file: {target}: is a directory")
    except OSError as e:
        raise MountFailed(f"failed to create {'directory' if kind == 'dir' else 'file'}: {target}: {e.strerror}") from None
