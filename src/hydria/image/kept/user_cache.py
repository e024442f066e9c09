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

Layered images (``HYDRIA_LAYERED_IMAGES``, image/kept/layered_import.py) are kept in the same folder:
an entry ``<key>.layers`` (runtime/layered.py) names layer images ``layer-<key>.sqsh`` beside
it, each kept once whatever number of images share it (its key: the layer blob's digest, the
squash options and the format). Hydria links them where the user can reach them (a build's
``.hydria-layers``, a container's folder), so a layer image is kept read-only (0444: ``cp`` or
``>`` onto a link fails) with a modification time of its own (``LAYER_MTIME_NS``): one written
to all the same (by root, or after a chmod) has another, is never used and is squashed again. A layer image
that no entry names is removed when entries are evicted, unless an import holds
``.layers.lock`` (shared: it is making an entry; eviction takes it exclusively, or leaves the
layers for the next one).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hydria import locks
from hydria.anonfile import AnonymousFile, anonymous_file, link_or_copy
from hydria.errors import HydriaError
from hydria.image.kept.interface import (
    IMAGE_FORMAT,
    IMAGE_SUFFIX,
    LAYER_FORMAT,
    LAYERED_SUFFIX,
    KeptImage,
    kept_image_files,
    layer_key,
    layered_in_use,
    mark_source,
    most_recent_first,
    names_in,
    source_of,
    unnamed_layers,
    weigh,
    with_layers_size,
)
from hydria.image.kept.prune import Item, regular_files
from hydria.image.ref.manifest import Platform
from hydria.log import Logger
from hydria.paths import ensure_dir, is_own_private_dir, user_name
from hydria.runtime.layered import layered_text
from hydria.runtime.rootfs import layer_problem
from hydria.version import __version__

log = Logger(__name__)

LAYER_MODE = 0o444
LAYER_MTIME_NS = 1_000_000_000  # 1970-01-01 00:00:01 UTC: any write through any link sets another

SUFFIX = IMAGE_SUFFIX
LAYERS_LOCK = ".layers.lock"


class ImageCache:
    """The images one user keeps under the cache directory ``root``; ``keep`` of them at most: a
    home of kept images (hydria/image/kept/interface.py) that trusts the user's own files alone."""

    def __init__(self, root: str | Path, keep: int) -> None:
        # Right in the cache directory, not in a shared "images" folder: in a shared (sticky)
        # cache the owner of such a folder could rename other users' entries.
        self.directory = Path(root) / f"images.{os.geteuid()}"
        self.keep = keep

    def entry(self, uri: str, manifest_digest: str, squash_options: str, platform: Platform,
              layered: bool = False) -> CachedImage:
        text = f"{IMAGE_FORMAT}\n{__version__}\n{uri}\n{manifest_digest}\n{squash_options}{platform.key_part()}"
        if layered:
            text += f"\nlayered {LAYER_FORMAT}"
        return CachedImage(self, hashlib.sha256(text.encode()).hexdigest(), LAYERED_SUFFIX if layered else SUFFIX,
                           source=(uri, manifest_digest))

    def layer(self, blob_digest: str, squash_options: str) -> str | None:
        """The name of the kept layer image of ``blob_digest``, when there is one."""
        name = layer_key(blob_digest, squash_options) + SUFFIX
        return name if _whole_layer(self.directory / name) else None

    def add_layer(self, blob_digest: str, squash_options: str, write: Callable[[AnonymousFile], None]) -> str:
        """Keep the layer image that ``write`` writes into the anonymous file it is given; its name.
        Raises HydriaError, OSError (a full disk: the import fails, as it would for its image)."""
        ensure_dir(str(self.directory), setting="HYDRIA_CACHE_PATH")
        target = self.directory / (layer_key(blob_digest, squash_options) + SUFFIX)
        with anonymous_file(target) as image:
            write(image)
            os.fchmod(image.fd, LAYER_MODE)
            os.utime(image.fd, ns=(time.time_ns(), LAYER_MTIME_NS))
            if not image.commit() and not _own_file(target):  # else a concurrent import kept it first
                raise HydriaError(f"cannot keep the layer image {target}: another file has its name")
        return target.name

    def layer_file(self, name: str) -> Path:
        """The path of the layer image ``name`` (as :meth:`layer` gives it)."""
        return self.directory / name

    @contextmanager
    def making_layered(self) -> Iterator[None]:
        """Hold the layers of this user's entries against removal by another import's eviction
        while this import makes an entry (a layer image is named by none until its entry exists)."""
        ensure_dir(str(self.directory), setting="HYDRIA_CACHE_PATH")
        with locks.held(self.directory / LAYERS_LOCK, shared=True):
            yield

    def usable(self) -> bool:
        """Whether the directory is this user's own (or missing); warns when it is not."""
        if not os.path.lexists(self.directory) or is_own_private_dir(self.directory):
            return True
        info = os.lstat(self.directory)
        log.warning("Not using the kept images in %s: it belongs to %s, or others can write it, or it is a link",
                    self.directory, user_name(info.st_uid))
        return False

    def evict(self) -> None:
        """Remove all but the ``keep`` most recently used entries, and the layer images that no
        entry left names."""
        entries = []
        for path in self.kept_images():
            try:
                entries.append((path.stat().st_atime_ns, path))
            except FileNotFoundError:
                continue  # another import removed it
        for _, path in sorted(entries, reverse=True)[self.keep:]:
            path.unlink(missing_ok=True)
        self.collect_layers()

    def kept_images(self) -> list[Path]:
        """The kept images: image files and layered images (not their layer images)."""
        return kept_image_files(self.directory)

    def prune_items(self) -> tuple[list[Item], int]:
        """The kept images as ``hydria cache prune`` weighs them (image/kept/interface.py's weigh)."""
        return weigh(self.directory, self.kept_images(), os.geteuid())

    def layered_in_use(self, mounted: set[str]) -> set[str]:
        """The layered images (real paths) that name one of the ``mounted`` files."""
        return layered_in_use(self.directory, self.kept_images(), mounted)

    def listing(self) -> list[KeptImage]:
        """The kept images, with the URI and digest recorded on each (image/kept/interface.py)."""
        found = []
        for path, info in regular_files(self.kept_images(), os.geteuid()):
            uri, digest = source_of(path)
            found.append(KeptImage(path.name.partition(".")[0], path, with_layers_size(self.directory, path, info),
                                   uri, digest, info.st_mtime, info.st_atime))
        return most_recent_first(found)

    def collect_layers(self) -> None:
        """Remove the layer images that no layered image names, unless an import is making one."""
        try:
            fd = locks.take(self.directory / LAYERS_LOCK, timeout=0, create=False)
        except OSError:
            return  # no layered image was ever made here
        if fd is None:
            return  # an import is making an entry: the next eviction collects them
        try:
            for path in unnamed_layers(self.directory, self.kept_images()):
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)


def _own_file(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user (a layer image or a layered image: files
    nobody writes after their import, unlike an image file that an import's output links)."""
    return _own_info(path) is not None


def _own_info(path: Path) -> os.stat_result | None:
    """The lstat of ``path`` when it is a regular file of this user, else None."""
    try:
        info = path.lstat()
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() else None


def _whole_layer(path: Path) -> bool:
    """Whether ``path`` is a whole layer image of this user; a damaged one (cut short by a full
    disk, a bad copy) goes, so that the next import makes it again."""
    info = _own_info(path)
    if info is None:
        return False
    if info.st_mtime_ns != LAYER_MTIME_NS:
        log.warning("Not using the layer image %s: it was written to after hydria made it (through a link to it, "
                    "in a build's .hydria-layers or a container's folder); squashing its layer again", path)
        path.unlink(missing_ok=True)
        return False
    problem = layer_problem(path)
    if problem is None:
        return True
    log.warning("Removing the damaged layer image %s: %s", path, problem)
    path.unlink(missing_ok=True)
    return False


class CachedImage:
    """The place of one image (by its key) in the cache: an image file, or a layered image."""

    def __init__(self, cache: ImageCache, key: str, suffix: str = SUFFIX, *, source: tuple[str, str] = ("", "")) -> None:
        self.cache = cache
        self.key = key
        self.suffix = suffix
        self.source = source  # URI and manifest digest, recorded on the entry (cache list)

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
        if self.suffix == LAYERED_SUFFIX:
            return self._valid_layered()
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

    def _valid_layered(self) -> Path | None:
        """The layered entry, if it is there with every layer image it names; else it goes."""
        path = self.cache.directory / (self.key + LAYERED_SUFFIX)
        if not _own_file(path):
            return None
        layers = names_in(path)
        if layers and all(_whole_layer(self.cache.directory / layer) for layer in layers):
            return path
        log.debug("dropping the layered cache entry %s: a layer image went or is damaged", path)
        path.unlink(missing_ok=True)
        return None

    def keep_layered(self, layers: list[str]) -> Path:
        """Keep a layered image of the ``layers`` just kept (names, the lowest first); its path.
        The caller evicts, once it no longer holds the layers (ImageCache.making_layered).
        Raises OSError, HydriaError (the import fails: nothing else holds the image)."""
        target = self.cache.directory / (self.key + LAYERED_SUFFIX)
        with anonymous_file(target, 0o644) as entry:
            os.write(entry.fd, layered_text(layers))
            mark_source(entry.fd, *self.source)
            if not entry.commit() and self._valid_layered() is None:  # else a concurrent import kept it first
                raise HydriaError(f"cannot keep the layered image {target}: another file has its name")
        return target

    def find(self) -> Path | None:
        """The entry, marked as used now, if it is there whole."""
        found = self._valid()
        if found is None:
            return None
        try:
            os.utime(found, ns=(time.time_ns(), found.stat().st_mtime_ns))  # marks the use; the name keeps mtime
        except FileNotFoundError:
            return None  # evicted by a concurrent import
        return found

    def link_to(self, target: Path, *, in_place: bool = False) -> Path | None:
        """The kept image at ``target`` (a hardlink, or a copy across file systems); with
        ``in_place``, the entry itself where ``target`` is on another file system (the caller must
        not write to it); None when there is none.

        Raises:
            FileExistsError: ``target`` appeared meanwhile.
        """
        found = self.find()
        if found is None:
            return None
        try:
            if self.suffix == LAYERED_SUFFIX or in_place and found.stat().st_dev != target.parent.stat().st_dev:
                return found  # a layered image is only ever used in place: its layers are beside it
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
            entry = self._name(image.stat())
            link_or_copy(image, entry)  # a copy keeps size and time: the same name
            mark_source(entry, *self.source)  # on the imported file too, where it is a link: which image it is
            self.cache.evict()
        except FileExistsError:
            pass  # a concurrent import of the same image kept it first
        except (OSError, HydriaError) as e:
            message = e.message if isinstance(e, HydriaError) else (e.strerror or str(e))
            log.warning("Could not keep the image in the cache (%s): %s", self.cache.directory, message)

    def _name(self, info: os.stat_result) -> Path:
        return self.cache.directory / f"{self.key}.{info.st_size}.{info.st_mtime_ns}{SUFFIX}"
