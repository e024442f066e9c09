"""Finished images kept in the cache, so that importing a registry image again (a Slurm job's
``--container-image`` on every step, a script that imports before each run) is a hardlink to the
image made last time instead of merging and compressing all its layers again.

An entry is ``CACHE/images.<uid>/<key>.<size>.<mtime_ns>.sqsh``, a hardlink to an imported image
(a copy when the output is on another file system). The key is a digest of everything the
image's bytes depend on: the manifest's digest (which pins the config and every layer), the URI
(the provenance line of ``/etc/rc``), the squash options, the platform that ``--arch`` asked for
(:meth:`Platform.key_part`) and hydria's image format; a moved tag
has another manifest digest, so it misses. Size and modification time are those of the finished
image: an entry whose file was since written to (say, ``cp`` over the imported file, which
writes into the same inode) no longer matches them and is dropped, never used.

Entries sit in a directory of their own user (0700), in a shared cache too: nobody uses an image
another user wrote. Only a real directory of the user that nobody else can write is used, and in
it only the user's regular files (no links): a directory another user made under that name (in a
shared cache, before the user's first import) is ignored with a warning naming its owner. The
``HYDRIA_CACHE_IMAGES`` most recently used entries of a user are kept (using one sets its access
time, as ``hydria cache prune`` reads it). Keeping an image can fail
(a full disk): that is a warning, never a failed import.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from hydria.anonfile import link_or_copy
from hydria.errors import HydriaError
from hydria.image.manifest import Platform
from hydria.log import Logger
from hydria.paths import ensure_dir, is_own_private_dir, user_name
from hydria.version import __version__

log = Logger(__name__)

IMAGE_FORMAT = "1"  # change it when an import writes other bytes for the same inputs
SUFFIX = ".sqsh"


class ImageCache:
    """The images one user keeps under the cache directory ``root``; ``keep`` of them at most."""

    def __init__(self, root: str | Path, keep: int) -> None:
        # Right in the cache directory, not in a shared "images" folder: in a shared (sticky)
        # cache the owner of such a folder could rename other users' entries.
        self.directory = Path(root) / f"images.{os.geteuid()}"
        self.keep = keep

    def entry(self, uri: str, manifest_digest: str, squash_options: str, platform: Platform) -> CachedImage:
        text = f"{IMAGE_FORMAT}\n{__version__}\n{uri}\n{manifest_digest}\n{squash_options}{platform.key_part()}"
        return CachedImage(self, hashlib.sha256(text.encode()).hexdigest())

    def usable(self) -> bool:
        """Whether the directory is this user's own (or missing); warns when it is not."""
        if not os.path.lexists(self.directory) or is_own_private_dir(self.directory):
            return True
        info = os.lstat(self.directory)
        log.warning("Not using the kept images in %s: it belongs to %s, or others can write it, or it is a link",
                    self.directory, user_name(info.st_uid))
        return False

    def evict(self) -> None:
        """Remove all but the ``keep`` most recently used entries."""
        entries = []
        for path in self.directory.glob("*" + SUFFIX):
            try:
                entries.append((path.stat().st_atime_ns, path))
            except FileNotFoundError:
                continue  # another import removed it
        for _, path in sorted(entries, reverse=True)[self.keep:]:
            path.unlink(missing_ok=True)


class CachedImage:
    """The place of one image (by its key) in the cache."""

    def __init__(self, cache: ImageCache, key: str) -> None:
        self.cache = cache
        self.key = key

    def _candidates(self) -> Iterator[Path]:
        try:
            names = os.listdir(self.cache.directory)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(self.key + ".") and name.endswith(SUFFIX):
                yield self.cache.directory / name

    def _valid(self) -> Path | None:
        """The entry, if there is one and its file is still the image it was; stale ones go."""
        for path in self._candidates():
            try:
                size, mtime = (int(part) for part in path.name[len(self.key) + 1:-len(SUFFIX)].split("."))
                info = path.lstat()
            except (ValueError, FileNotFoundError):
                info = None
            if info is not None and stat.S_ISREG(info.st_mode) and \
                    (info.st_size, info.st_mtime_ns, info.st_uid) == (size, mtime, os.geteuid()):
                return path
            log.debug("dropping the changed cache entry %s", path)
            path.unlink(missing_ok=True)
        return None

    def link_to(self, target: Path, *, in_place: bool = False) -> Path | None:
        """The kept image at ``target`` (a hardlink, or a copy across file systems); with
        ``in_place``, the entry itself where ``target`` is on another file system (the caller must
        not write to it); None when there is none.

        Raises:
            FileExistsError: ``target`` appeared meanwhile.
        """
        found = self._valid()
        if found is None:
            return None
        try:
            os.utime(found, ns=(time.time_ns(), found.stat().st_mtime_ns))  # marks the use; the name keeps mtime
            if in_place and found.stat().st_dev != target.parent.stat().st_dev:
                return found
            link_or_copy(found, target)
        except FileNotFoundError:
            return None  # evicted by a concurrent import
        return target

    def keep(self, image: Path) -> None:
        """Keep the just imported ``image`` (a hardlink, or a copy across file systems), then drop
        the least recently used entries."""
        try:
            ensure_dir(str(self.cache.directory), setting="HYDRIA_CACHE_PATH")  # another user's: refused
            if self._valid() is not None:
                return  # a concurrent import of the same image kept it first
            link_or_copy(image, self._name(image.stat()))  # a copy keeps size and time: the same name
            self.cache.evict()
        except FileExistsError:
            pass  # a concurrent import of the same image kept it first
        except (OSError, HydriaError) as e:
            message = e.message if isinstance(e, HydriaError) else (e.strerror or str(e))
            log.warning("Could not keep the image in the cache (%s): %s", self.cache.directory, message)

    def _name(self, info: os.stat_result) -> Path:
        return self.cache.directory / f"{self.key}.{info.st_size}.{info.st_mtime_ns}{SUFFIX}"
