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

Layered images (``HYDRIA_LAYERED_IMAGES``, image/layered_import.py) are kept in the same folder:
an entry ``<key>.<size>.<mtime_ns>.layers`` (runtime/layered.py) names layer images
``layer-<key>.<size>.<mtime_ns>.sqsh`` beside it, each kept once whatever number of images
share it (its key: the layer blob's digest, the squash options and the format). A layer image
that no entry names is removed when entries are evicted, unless an import holds
``.layers.lock`` (shared: it is making an entry; eviction takes it exclusively, or leaves the
layers for the next one).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hydria.anonfile import AnonymousFile, anonymous_file, link_or_copy
from hydria.errors import HydriaError
from hydria.image.manifest import Platform
from hydria.log import Logger
from hydria.paths import ensure_dir, is_own_private_dir, user_name
from hydria.runtime.layered import LayeredImageError, layer_names, layered_text
from hydria.version import __version__

log = Logger(__name__)

IMAGE_FORMAT = "1"  # change it when an import writes other bytes for the same inputs
LAYER_FORMAT = "1"  # the same for a layer image (image/layerimage.py)
SUFFIX = ".sqsh"
LAYERED_SUFFIX = ".layers"
LAYER_PREFIX = "layer-"
LAYERS_LOCK = ".layers.lock"


class ImageCache:
    """The images one user keeps under the cache directory ``root``; ``keep`` of them at most."""

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
        return CachedImage(self, hashlib.sha256(text.encode()).hexdigest(), LAYERED_SUFFIX if layered else SUFFIX)

    def layer(self, blob_digest: str, squash_options: str) -> str | None:
        """The name of the kept layer image of ``blob_digest``, when there is a valid one."""
        return _valid_entry(self.directory, layer_key(blob_digest, squash_options), SUFFIX)

    def add_layer(self, blob_digest: str, squash_options: str, write: Callable[[AnonymousFile], None]) -> str:
        """Keep the layer image that ``write`` writes into the anonymous file it is given; its name.
        Raises HydriaError, OSError (a full disk: the import fails, as it would for its image)."""
        ensure_dir(str(self.directory), setting="HYDRIA_CACHE_PATH")
        key = layer_key(blob_digest, squash_options)
        with anonymous_file(self.directory / f"{key}.new{SUFFIX}") as image:
            write(image)
            image.target = self.directory / _entry_name(key, os.fstat(image.fd), SUFFIX)
            if not image.commit():
                raise HydriaError(f"cannot keep the layer image {image.target}: the name is taken")
        return image.target.name

    @contextmanager
    def making_layered(self) -> Iterator[None]:
        """Hold the layers of this user's entries against removal by another import's eviction
        while this import makes an entry (a layer image is named by none until its entry exists)."""
        ensure_dir(str(self.directory), setting="HYDRIA_CACHE_PATH")
        fd = os.open(self.directory / LAYERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

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
        for path in self.entries():
            try:
                entries.append((path.stat().st_atime_ns, path))
            except FileNotFoundError:
                continue  # another import removed it
        for _, path in sorted(entries, reverse=True)[self.keep:]:
            path.unlink(missing_ok=True)
        self.collect_layers()

    def entries(self) -> list[Path]:
        """The kept images: image files and layered images (not their layer images)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return [self.directory / name for name in names
                if name.endswith(LAYERED_SUFFIX) or name.endswith(SUFFIX) and not name.startswith(LAYER_PREFIX)]

    def layer_users(self) -> dict[str, list[Path]]:
        """Each layer image's name, with the layered images that name it (none: nobody needs it)."""
        users: dict[str, list[Path]] = {}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return users
        for name in names:
            if name.startswith(LAYER_PREFIX) and name.endswith(SUFFIX):
                users.setdefault(name, [])
        for path in self.entries():
            if path.name.endswith(LAYERED_SUFFIX):
                for layer in _names_in(path):
                    users.setdefault(layer, []).append(path)
        return users

    def collect_layers(self) -> None:
        """Remove the layer images that no layered image names, unless an import is making one."""
        try:
            fd = os.open(self.directory / LAYERS_LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return  # no layered image was ever made here
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return  # an import is making an entry: the next eviction collects them
        try:
            for name, users in self.layer_users().items():
                if not users:
                    (self.directory / name).unlink(missing_ok=True)
        finally:
            os.close(fd)


def layer_key(blob_digest: str, squash_options: str) -> str:
    """A layer image's key: what its bytes depend on (the blob's digest, verified at download)."""
    text = f"{LAYER_FORMAT}\n{__version__}\n{blob_digest}\n{squash_options}"
    return LAYER_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def _entry_name(key: str, info: os.stat_result, suffix: str) -> str:
    return f"{key}.{info.st_size}.{info.st_mtime_ns}{suffix}"


def _valid_entry(directory: Path, key: str, suffix: str) -> str | None:
    """The name of the entry ``key`` in ``directory`` whose file is still what it was; stale ones go."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    for name in names:
        if not (name.startswith(key + ".") and name.endswith(suffix)):
            continue
        if _unchanged(directory / name, key, suffix):
            return name
        log.debug("dropping the changed cache entry %s", name)
        (directory / name).unlink(missing_ok=True)
    return None


def _unchanged(path: Path, key: str, suffix: str) -> bool:
    """Whether ``path`` (``key.SIZE.MTIME``) is this user's regular file of that size and time."""
    try:
        size, mtime = (int(part) for part in path.name[len(key) + 1:-len(suffix)].split("."))
        info = path.lstat()
    except (ValueError, OSError):
        return False
    return stat.S_ISREG(info.st_mode) and (info.st_size, info.st_mtime_ns, info.st_uid) == (size, mtime, os.geteuid())


def _names_in(layered: Path) -> list[str]:
    """The layer images that the layered image ``layered`` names (none when it cannot be read)."""
    try:
        return layer_names(layered.read_bytes())
    except (OSError, LayeredImageError):
        return []


class CachedImage:
    """The place of one image (by its key) in the cache: an image file, or a layered image."""

    def __init__(self, cache: ImageCache, key: str, suffix: str = SUFFIX) -> None:
        self.cache = cache
        self.key = key
        self.suffix = suffix

    def _valid(self) -> Path | None:
        """The entry, if there is one and its file is still the image it was (a layered image's
        layers too); stale ones go."""
        name = _valid_entry(self.cache.directory, self.key, self.suffix)
        if name is None:
            return None
        path = self.cache.directory / name
        if self.suffix == LAYERED_SUFFIX:
            layers = _names_in(path)
            if not layers or not all(_unchanged(self.cache.directory / layer, layer.split(".", 1)[0], SUFFIX)
                                     for layer in layers):
                log.debug("dropping the layered cache entry %s: a layer image changed or went", name)
                path.unlink(missing_ok=True)
                return None
        return path

    def keep_layered(self, layers: list[str]) -> Path:
        """Keep a layered image of the ``layers`` just kept (names, the lowest first); its path.
        The caller evicts, once it no longer holds the layers (ImageCache.making_layered).
        Raises OSError, HydriaError (the import fails: nothing else holds the image)."""
        text = layered_text(layers)
        with anonymous_file(self.cache.directory / f"{self.key}.new{LAYERED_SUFFIX}", 0o644) as entry:
            os.write(entry.fd, text)
            entry.target = self.cache.directory / _entry_name(self.key, os.fstat(entry.fd), LAYERED_SUFFIX)
            if not entry.commit():
                raise HydriaError(f"cannot keep the layered image {entry.target}: the name is taken")
        return entry.target

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
            link_or_copy(image, self._name(image.stat()))  # a copy keeps size and time: the same name
            self.cache.evict()
        except FileExistsError:
            pass  # a concurrent import of the same image kept it first
        except (OSError, HydriaError) as e:
            message = e.message if isinstance(e, HydriaError) else (e.strerror or str(e))
            log.warning("Could not keep the image in the cache (%s): %s", self.cache.directory, message)

    def _name(self, info: os.stat_result) -> Path:
        return self.cache.directory / _entry_name(self.key, info, SUFFIX)
