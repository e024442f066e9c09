"""A build step's changes as an OCI layer: the overlay's upper folder written as a tar.

A step runs on an overlay whose upper folder collects exactly what it changed, in the kernel's
overlay format: a deleted path is a character device 0/0 (a whiteout) and a folder that replaced
one of the lower layers carries the ``user.overlay.opaque`` attribute. The layer says the same in
OCI's format (``.wh.NAME``, ``.wh..wh..opq``). Owners are the build's: every entry belongs to
root (one ID mapped: the files are the user's on the host, root's in the container) unless the
step said otherwise (``COPY --chown``). File contents are streamed, never held in memory.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Mapping
from typing import IO

from hydria.image.squash.flatten import OPAQUE, WHITEOUT
from hydria.record import Record

OPAQUE_XATTR = "user.overlay.opaque"
COMPRESSION_LEVEL = 2  # isal's igzip (0-3): about as small as gzip -6, many times faster
CHUNK = 1 << 20
MAX_COMPRESSORS = 3  # the tar writer takes about a third of a layer's time


class Layer(Record):
    """A layer blob: its digest (of the gzip), its diff ID (of the tar) and its size."""

    digest: str
    diff_id: str
    size: int


class _Hashing:
    """A file object that hashes and counts what passes through it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def is_whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def is_empty(upper: str) -> bool:
    with os.scandir(upper) as entries:
        return next(entries, None) is None


def write_layer(upper: str, blob: IO[bytes], owners: Mapping[str, tuple[int, int]] | None = None,
                own_ids: bool = False, processors: int = 0) -> Layer:
    """Write the changes in ``upper`` as a gzip-compressed layer tar to ``blob``. ``owners``:
    the owner of some paths (relative, ``/``-separated); the others' are root, or with
    ``own_ids`` (run in the namespace of the step's full ID mapping) the ones they have.

    The tar is compressed in threads beside the one that writes it (``processors``: at most
    that many, 0: those of this machine), in blocks of a fixed size: the same bytes whatever
    the number of threads, so that one step makes one digest on every node."""
    from isal import igzip_threaded

    compressed = _Hashing(blob)
    with igzip_threaded.open(compressed, "wb", compresslevel=COMPRESSION_LEVEL,  # type: ignore[no-untyped-call]
                             threads=compressors(processors)) as gz:
        plain = _Hashing(gz)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            _add_tree(tar, upper, owners or {}, own_ids)
    return Layer(f"sha256:{compressed.hash.hexdigest()}", f"sha256:{plain.hash.hexdigest()}", compressed.size)


def compressors(processors: int) -> int:
    """Threads that compress a layer: one per processor but the tar writer's, at most
    ``MAX_COMPRESSORS`` (beyond which the tar writer is what the layer waits for)."""
    available = processors if processors > 0 else len(os.sched_getaffinity(0))
    return max(1, min(available - 1, MAX_COMPRESSORS))


def _add_tree(tar: tarfile.TarFile, upper: str, owners: Mapping[str, tuple[int, int]], own_ids: bool) -> None:
    links: dict[tuple[int, int], str] = {}
    pending = [""]
    while pending:
        folder = pending.pop()
        with os.scandir(os.path.join(upper, folder)) as scanned:
            entries = sorted(scanned, key=lambda e: e.name)
        for entry in entries:
            relative = f"{folder}/{entry.name}" if folder else entry.name
            info = entry.stat(follow_symlinks=False)
            if is_whiteout(info):
                tar.addfile(_info(f"{folder}/{WHITEOUT}{entry.name}" if folder else f"{WHITEOUT}{entry.name}",
                                  tarfile.REGTYPE, 0o600, info.st_mtime, (0, 0)))
                continue
            owner = owners.get(relative, (info.st_uid, info.st_gid) if own_ids else (0, 0))
            if stat.S_ISDIR(info.st_mode):
                tar.addfile(_info(relative, tarfile.DIRTYPE, info.st_mode, info.st_mtime, owner))
                if is_opaque(entry.path):
                    tar.addfile(_info(f"{relative}/{OPAQUE}", tarfile.REGTYPE, 0o600, info.st_mtime, (0, 0)))
                pending.append(relative)
            elif stat.S_ISLNK(info.st_mode):
                member = _info(relative, tarfile.SYMTYPE, info.st_mode, info.st_mtime, owner)
                member.linkname = os.readlink(entry.path)
                tar.addfile(member)
            elif stat.S_ISREG(info.st_mode):
                identity = (info.st_dev, info.st_ino)
                if info.st_nlink > 1 and identity in links:
                    member = _info(relative, tarfile.LNKTYPE, info.st_mode, info.st_mtime, owner)
                    member.linkname = links[identity]
                    tar.addfile(member)
                    continue
                links[identity] = relative
                member = _info(relative, tarfile.REGTYPE, info.st_mode, info.st_mtime, owner)
                with open(entry.path, "rb") as content:
                    member.size = os.fstat(content.fileno()).st_size
                    tar.addfile(member, content)
            elif stat.S_ISFIFO(info.st_mode):
                tar.addfile(_info(relative, tarfile.FIFOTYPE, info.st_mode, info.st_mtime, owner))
            # sockets and device nodes: a build in a user namespace cannot make usable ones


def _info(name: str, kind: bytes, mode: int, mtime: float, owner: tuple[int, int]) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.mode = stat.S_IMODE(mode)
    member.mtime = int(mtime)
    member.uid, member.gid = owner
    member.uname = member.gname = ""
    return member
