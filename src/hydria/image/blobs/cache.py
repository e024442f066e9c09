"""The content-addressed blob cache: ``CACHE/blobs/sha256/<hex>``, safe for many processes and
many users at once.

* A blob is written to an anonymous file (:mod:`hydria.anonfile`) while its digest is computed,
  and gets its name only when the digest matches, so a killed import leaves nothing behind and a
  reader never sees a partial blob.
* One lock file per blob (``flock``) makes concurrent imports of one image download each blob
  once: the others wait and then find it.
* Shared cache: when the cache directory is world-writable and sticky (mode 1777, like ``/tmp``),
  hydria keeps that mode on the directories it makes inside, writes blobs 0644, and so every user
  can read and add blobs while only a blob's writer (or root) can delete it.
* Nothing there is trusted unless it is this user's (or root's) regular file, reached without
  links, in blob folders of this user or root: any other entry is verified against its digest
  before it is used (and again as it is read, in case its owner writes to it meanwhile). An entry
  that is a link, not a regular file or not the blob never blocks an import: the blob goes to the
  user's private cache instead (``private``), with one warning naming the entry and its owner.
* Lock files are per user (``<hex>.<uid>.lock``, mode 0600, opened without following links), so
  that nobody else can hold them; one that another user planted under that name is not used.
  Across the users of a shared cache, downloads are announced instead, and a user waits for
  another's download only while it runs and progresses (:mod:`hydria.image.blobs.downloads`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Protocol

from hydria import locks
from hydria.anonfile import anonymous_file
from hydria.errors import HydriaError
from hydria.image.blobs import downloads
from hydria.image.blobs import layout as cachelayout
from hydria.image.blobs.growing_blob import GrowingBlob
from hydria.image.ref.manifest import Blob
from hydria.log import Logger
from hydria.paths import ensure_dir, open_binary, open_regular, user_name
from hydria.record import Record

log = Logger(__name__)


class DigestMismatch(HydriaError):
    """Content does not have the digest it was asked for."""


def is_digest(text: object) -> bool:
    """Whether ``text`` is a digest hydria takes: ``sha256:`` and 64 lower-case hex digits."""
    if not isinstance(text, str):
        return False
    algorithm, _, value = text.partition(":")
    return algorithm == "sha256" and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def hex_of(digest: str) -> str:
    """The hex part of ``sha256:<hex>``. Raises DigestMismatch for anything else."""
    if not is_digest(digest):
        raise DigestMismatch(f"unsupported or malformed digest: {digest!r}")
    return digest.partition(":")[2]


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


class CachedBlob(Record):
    path: Path
    trusted: bool  # written by this user or root: no need to verify again


class BlobCache:
    """Blobs under ``root``, which is created 0700 unless it already exists (shared or not);
    ``private``: where blobs go when an entry of ``root`` cannot be used (made when needed)."""

    def __init__(self, root: str | Path, private: str | Path | None = None) -> None:
        root = Path(root)
        private_root = Path(private) if private is not None and Path(private) != root else None
        layout = cachelayout.inspect(root)
        if layout.problem:
            raise HydriaError(layout.problem, hint=layout.hint)
        if layout.unusable:
            if private_root is None:
                raise HydriaError(f"cannot add to {', '.join(layout.unusable)} of the shared cache {root}",
                                  hint=f"the administrator makes them chmod 1777 ({cachelayout.GUIDE})")
            log.warning("Not using the shared cache %s: you cannot add to %s; using your private cache %s "
                        "(the administrator can fix it: chmod 1777 on them, see %s)",
                        root, ", ".join(layout.unusable), private_root, cachelayout.GUIDE)
            root, layout = private_root, cachelayout.inspect(private_root)
            private_root = None
        self.root = root
        self._private_root = private_root
        self._private: BlobCache | None = None
        self._refused: set[str] = set()  # digests whose entry here is unusable
        self._verified: set[str] = set()  # digests whose entry of another owner was checked
        if not root.exists():
            ensure_dir(str(root), setting="HYDRIA_CACHE_PATH")
        self.shared = layout.shared
        self._folder_mode = layout.folder_mode
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
                current.mkdir(mode=self._folder_mode)
                if self.shared:
                    current.chmod(self._folder_mode)  # mkdir's mode is masked by the umask
            except FileExistsError:
                pass
            except OSError as e:
                raise HydriaError(f"{current} (HYDRIA_CACHE_PATH): cannot create directory: {e.strerror}",
                                  hint="set HYDRIA_CACHE_PATH to a directory you can write") from None
        return path

    def path(self, digest: str) -> Path:
        return self.blobs / hex_of(digest)

    def lookup(self, digest: str) -> CachedBlob | None:
        """The blob's usable entry: here, or in the private cache when the one here is unusable."""
        if digest not in self._refused:
            found = self._entry(digest)
            if found is not None or digest not in self._refused:
                return found
        private = self._private_cache()
        return private.lookup(digest) if private is not None else None

    def _entry(self, digest: str) -> CachedBlob | None:
        path = self.path(digest)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        trusted = info.st_uid in (os.geteuid(), 0) and self.own_folders
        if stat.S_ISREG(info.st_mode) and (trusted or self._is_blob(path, digest, info)):
            return CachedBlob(path, trusted)
        self._refused.add(digest)
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else "a link or special file"
        log.warning("Not using %s (owned by %s): %s that is not the blob; using your private cache %s",
                    path, user_name(info.st_uid), kind, self._private_root or "(none)")
        return None

    def _is_blob(self, path: Path, digest: str, info: os.stat_result) -> bool:
        """Whether the regular file at ``path`` (``info``: its lstat) holds ``digest``'s content."""
        if digest in self._verified:
            return True
        try:
            fd = open_regular(path, follow_links=False)
        except OSError:
            return False
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                return False
            hashing = hashlib.sha256()
            while chunk := os.read(fd, 1 << 20):
                hashing.update(chunk)
        finally:
            os.close(fd)
        if "sha256:" + hashing.hexdigest() != digest:
            return False
        self._verified.add(digest)
        return True

    def _private_cache(self) -> BlobCache | None:
        if self._private is None and self._private_root is not None:
            self._private = BlobCache(ensure_dir(str(self._private_root), setting="the private blob cache"))
        return self._private

    @contextmanager
    def reading(self, found: CachedBlob, digest: str) -> Iterator[Blob]:
        """A reader of ``found``: opened without following links; verified as it is read unless trusted.

        Raises:
            OSError: the entry is no longer a regular file.
        """
        with open_binary(found.path, follow_links=False) as handle:
            yield handle if found.trusted else VerifyingReader(handle, digest, str(found.path))

    def fetch(self, digest: str, download: Callable[[Writer], None],
              growing: GrowingBlob | None = None, size: int | None = None) -> CachedBlob:
        """The blob ``digest`` (of ``size`` bytes, when known), downloading it with
        ``download(file)`` unless present, or waiting for another user's download of it in a shared
        cache; ``growing`` is told about the download's file and each write, for a reader that follows.

        Raises:
            DigestMismatch: the downloaded content has another digest; nothing is kept.
        """
        found = self._present(digest, download, growing)
        if found:
            return found
        with self._lock(digest):
            found = self._present(digest, download, growing)
            if found:
                return found
            with ExitStack() as stack:
                announcer = None
                if self.shared:
                    announcer = stack.enter_context(downloads.announced(self.locks, hex_of(digest)))
                    downloads.wait_for_others(self.locks, digest, size, announcer,
                                              lambda: self.lookup(digest) is not None or digest in self._refused)
                    found = self._present(digest, download, growing)
                    if found:
                        return found
                committed = self._download(digest, download, growing, announcer)
            if committed is not None:
                return committed
        # Another writer published it first: theirs, if it is the blob.
        found = self.lookup(digest)
        if found is None:
            raise HydriaError(f"{self.path(digest)} was replaced while the blob downloaded",
                              hint="import again: the blob then goes to your private cache")
        return found

    def _present(self, digest: str, download: Callable[[Writer], None],
                 growing: GrowingBlob | None) -> CachedBlob | None:
        """The blob when it is here; where the entry here will not do, the private cache's (fetched
        there); None when it is to be downloaded here."""
        found = self.lookup(digest)
        if found is None and digest in self._refused:
            return self._fetch_privately(digest, download, growing)
        return found

    def _download(self, digest: str, download: Callable[[Writer], None], growing: GrowingBlob | None,
                  announcer: downloads.Announcer | None) -> CachedBlob | None:
        """The blob, downloaded and verified; None when another writer published it first."""
        path = self.path(digest)
        with anonymous_file(path) as blob:
            if growing is not None:
                growing.started(blob.fd)
            hashing = _HashingWriter(blob.fd, growing.grew if growing is not None else None, path, self.root)
            if announcer is not None:
                announcer.received = lambda: hashing.written
            download(hashing)
            actual = "sha256:" + hashing.hash.hexdigest()
            if actual != digest:
                raise DigestMismatch(f"Checksum mismatch: {digest} (received {actual})",
                                     hint="the registry or the network corrupted the blob; try again")
            return CachedBlob(path, True) if blob.commit() else None

    def _fetch_privately(self, digest: str, download: Callable[[Writer], None],
                         growing: GrowingBlob | None) -> CachedBlob:
        private = self._private_cache()
        if private is None:
            raise HydriaError(f"{self.path(digest)} is not the blob {digest}, and there is no private cache to use",
                              hint="set HYDRIA_CACHE_PATH to a directory of your own")
        return private.fetch(digest, download, growing)

    @contextmanager
    def _lock(self, digest: str) -> Iterator[None]:
        """This user's lock on downloading ``digest``; none (with a warning) when another user
        planted a file or link under its name."""
        path = self.locks / f"{hex_of(digest)}.{os.geteuid()}.lock"
        try:
            fd = locks.open_lock(path)
        except OSError as e:
            log.warning("Not using the lock %s: %s; downloading without it", path, e.strerror)
            yield
            return
        try:
            owner = os.fstat(fd).st_uid
            if owner == os.geteuid():
                locks.acquire(fd)  # only this user's imports can hold it
            else:
                log.warning("Not using the lock %s: it belongs to %s; downloading without it", path, user_name(owner))
            yield
        finally:
            os.close(fd)


class _HashingWriter:
    """Writes to ``fd`` unbuffered (so a following reader sees every byte written), hashing it;
    ``where`` names the blob's place, and ``cache`` the cache it is in, in messages."""

    def __init__(self, fd: int, grew: Callable[[int], None] | None, where: Path, cache: Path) -> None:
        self.fd = fd
        self.grew = grew
        self.where = where
        self.cache = cache
        self.hash = hashlib.sha256()
        self.written = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.written += len(data)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except OSError as e:
                full = e.errno in (errno.ENOSPC, errno.EDQUOT)
                raise HydriaError(f"cannot write {self.where}: {e.strerror}",
                                  hint=f"free space in {self.cache} (HYDRIA_CACHE_PATH) or set "
                                       "HYDRIA_CACHE_PATH to a file system with room" if full else None) from None
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
