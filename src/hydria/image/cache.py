"""The content-addressed blob cache: ``CACHE/blobs/sha256/<hex>``, safe for many processes and
many users at once.

* A blob is written to an anonymous file (:mod:`hydria.anonfile`) while its digest is computed,
  and gets its name only when the digest matches, so a killed import leaves nothing behind and a
  reader never sees a partial blob.
* One lock file per blob (``flock``) makes concurrent imports of one image download each blob
  once: the others wait and then find it.
* Shared cache: when the cache directory is world-writable and sticky (mode 1777, like ``/tmp``),
  hydria keeps that mode on the directories it makes inside, writes blobs 0644, and so every user
  can read and add blobs while only a blob's writer (or root) can delete it. A blob another user
  wrote is verified against its digest as it is read, so nobody can slip a wrong blob to others;
  so is every blob when the blob folders belong to another user (who could rename blobs there).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hydria.anonfile import anonymous_file
from hydria.errors import HydriaError
from hydria.image.growing import GrowingBlob
from hydria.image.manifest import Blob
from hydria.paths import ensure_dir

SHARED_MODE = 0o1777


class DigestMismatch(HydriaError):
    """Content does not have the digest it was asked for."""


def hex_of(digest: str) -> str:
    """The hex part of ``sha256:<hex>``. Raises DigestMismatch for anything else."""
    algorithm, _, value = digest.partition(":")
    if algorithm != "sha256" or len(value) != 64 or not all(c in "0123456789abcdef" for c in value):
        raise DigestMismatch(f"unsupported or malformed digest: {digest!r}")
    return value


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True)
class CachedBlob:
    path: Path
    trusted: bool  # written by this user or root: no need to verify again


class BlobCache:
    """Blobs under ``root``, which is created 0700 unless it already exists (shared or not)."""

    def __init__(self, root: str | Path) -> None:
        root = Path(root)
        self.root = root
        shared = root.is_dir() and stat.S_IMODE(root.stat().st_mode) & SHARED_MODE == SHARED_MODE
        if not root.exists():
            ensure_dir(str(root), setting="HYDRIA_CACHE_PATH")
        self.shared = shared
        self.blobs = self._subdir("blobs", "sha256")
        self.locks = self._subdir("locks")
        # The owner of a blob's folder can rename the blobs in it, also in a sticky one: then even
        # this user's own blobs may sit under another digest's name, and are verified as read.
        self.own_folders = all(path.stat().st_uid in (os.geteuid(), 0) for path in (self.blobs, self.blobs.parent))

    def _subdir(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        if path.is_dir():
            return path
        for current in [self.root.joinpath(*parts[: i + 1]) for i in range(len(parts))]:
            try:
                current.mkdir(mode=SHARED_MODE if self.shared else 0o700)
                if self.shared:
                    current.chmod(SHARED_MODE)  # mkdir's mode is masked by the umask
            except FileExistsError:
                pass
            except OSError as e:
                raise HydriaError(f"{current} (HYDRIA_CACHE_PATH): cannot create directory: {e.strerror}",
                                  hint="set HYDRIA_CACHE_PATH to a directory you can write") from None
        return path

    def path(self, digest: str) -> Path:
        return self.blobs / hex_of(digest)

    def lookup(self, digest: str) -> CachedBlob | None:
        path = self.path(digest)
        try:
            owner = path.stat().st_uid
        except FileNotFoundError:
            return None
        return CachedBlob(path, owner in (os.geteuid(), 0) and self.own_folders)

    def fetch(self, digest: str, download: Callable[[Writer], None],
              growing: GrowingBlob | None = None) -> CachedBlob:
        """The blob ``digest``, downloading it with ``download(file)`` unless present;
        ``growing`` is told about the download's file and each write, for a reader that follows.

        Raises:
            DigestMismatch: the downloaded content has another digest; nothing is kept.
        """
        found = self.lookup(digest)
        if found:
            return found
        with self._lock(digest):
            found = self.lookup(digest)
            if found:
                return found
            with anonymous_file(self.path(digest)) as blob:
                if growing is not None:
                    growing.started(blob.fd)
                hashing = _HashingWriter(blob.fd, growing.grew if growing is not None else None)
                download(hashing)
                actual = "sha256:" + hashing.hash.hexdigest()
                if actual != digest:
                    raise DigestMismatch(f"Checksum mismatch: {digest} (received {actual})",
                                         hint="the registry or the network corrupted the blob; try again")
                blob.commit()  # False: another writer published the same content first
        return CachedBlob(self.path(digest), True)

    @contextmanager
    def _lock(self, digest: str) -> Iterator[None]:
        fd = os.open(self.locks / f"{hex_of(digest)}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


class _HashingWriter:
    """Writes to ``fd`` unbuffered (so a following reader sees every byte written), hashing it."""

    def __init__(self, fd: int, grew: Callable[[int], None] | None) -> None:
        self.fd = fd
        self.grew = grew
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        if self.grew is not None:
            self.grew(len(data))
        return len(data)


class VerifyingReader:
    """Reads a blob and raises DigestMismatch at its end if the content is not ``digest``."""

    def __init__(self, source: Blob, digest: str, where: str) -> None:
        self.source = source
        self.digest = digest
        self.where = where
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        if data:
            self.hash.update(data)
        else:
            self._check()
        return data

    def readinto(self, buffer: memoryview) -> int:
        count = self.source.readinto(buffer)
        if count:
            self.hash.update(memoryview(buffer)[:count])
        else:
            self._check()
        return count

    def _check(self) -> None:
        if "sha256:" + self.hash.hexdigest() != self.digest:
            raise DigestMismatch(f"Checksum mismatch: {self.digest} in {self.where}",
                                 hint="the blob is corrupt or was tampered with; delete it and import again")
