"""The image store: squashfs images that one account writes and every user reads, on a node's
disk or on the cluster's shared file system, so that an image is imported once, not once per
user and node (docs/store.md).

* ``STORE/images/<key>.sqsh``: the images, mode 0644, named by a digest of what their bytes
  depend on (the manifest digest, which pins the config and every layer; the URI, which the
  image's ``/etc/rc`` names; the squash options; the platform ``--arch`` asked for; hydria's
  image format), so that a name never
  stands for other bytes. They get their name only once complete (an anonymous file), so a
  killed import never leaves a half-written entry in sight.
* ``STORE/meta/<key>.json`` (mode 0600, for ``hydria store list``): what each image is.
* Only images that anyone may pull are kept: the owner's imports ask the registry without
  credentials (:func:`hydria.image.importer.import_into_store`), since anyone who learns an
  entry's path can read it. Entries of older versions, imported with the owner's credentials,
  carry no ``public`` mark in their record; the owner's next import makes them unreadable to
  others (:meth:`ImageStore.seal_unmarked`), and their keys are no longer asked for.
* ``STORE/locks/<key>.lock``: who imports an image now, a :class:`hydria.locks.LinkLock` (it
  holds on NFS, where ``flock`` may not): taken over from a dead importer, whose partial files go.

Users read: an entry is used only when it and every folder above it belong to the store's owner
(or root) and nobody else may write them. Only the owner writes, so a user gets from the store
what the owner's import of the same manifest made, and only after resolving the reference to that
manifest digest with their own credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
import time
from collections.abc import Callable
from pathlib import Path

from hydria.anonfile import AnonymousFile, anonymous_file
from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.image.kept.interface import (
    IMAGE_FORMAT,
    LAYER_FORMAT,
    LAYERED_SUFFIX,
    KeptImage,
    is_layer_image,
    kept_image_files,
    layer_key,
    layered_in_use,
    most_recent_first,
    names_in,
    unnamed_layers,
    weigh,
    with_layers_size,
)
from hydria.image.kept.prune import Item, item, mounted_images, regular_files, remove, victims
from hydria.image.ref.manifest import Platform
from hydria.locks import STALE_AFTER, LinkLock
from hydria.log import Logger
from hydria.paths import user_name, writable_by_others
from hydria.runtime.rootfs import layer_problem

log = Logger(__name__)

GRACE = 24 * 3600.0  # seconds after its last use (its access time) during which an image is never pruned
POLL = 0.5  # seconds between looks of an importer that waits for another
SUFFIX = ".sqsh"
PUBLIC = "public"  # in the key and the record of every image imported without credentials


class ImageStore:
    """The store at ``root``, written by ``owner`` (a user name; empty: the directory's owner): a
    home of kept images (hydria/image/kept/interface.py) that trusts the owner's and root's files alone."""

    def __init__(self, root: str | Path, owner: str = "", tell: Callable[[str], None] | None = None) -> None:
        """``tell`` also gets what an import says of other nodes' imports (waiting, taking over):
        the Slurm plugin shows it in the step's log."""
        self.root = Path(root)
        self.tell = tell
        self.images = self.root / "images"
        self.meta = self.root / "meta"
        self.locks = self.root / "locks"
        self.owner_uid = _owner_uid(self.root, owner)
        self.trusted = frozenset({0, self.owner_uid})

    def _say(self, write: Callable[[str], None], message: str) -> None:
        write(message)
        if self.tell is not None:
            self.tell(message)

    @classmethod
    def configured(cls, settings: Settings) -> ImageStore | None:
        """The store the settings name, when there is one and it can be trusted (else a warning)."""
        if not settings.store_path:
            return None
        try:
            store = cls(settings.store_path, settings.store_owner)
            store.check()
        except HydriaError as e:
            log.warning("Not using the image store: %s", e.message)
            return None
        return store

    def check(self) -> None:
        """Raises HydriaError unless only the owner (or root) can change the store's images."""
        exposed = writable_by_others(str(self.images), self.trusted)
        if exposed is not None:
            raise HydriaError(f"{self.images} (HYDRIA_STORE_PATH): {exposed} can be changed by others than "
                              f"{user_name(self.owner_uid)} and root, or does not exist",
                              hint=f"the administrator runs: hydria store init (as {user_name(self.owner_uid)})")

    def is_writer(self) -> bool:
        return os.geteuid() == self.owner_uid

    @staticmethod
    def key(uri: str, manifest_digest: str, squash_options: str, platform: Platform, layered: bool = False) -> str:
        text = f"{IMAGE_FORMAT}\n{uri}\n{manifest_digest}\n{squash_options}\n{PUBLIC}{platform.key_part()}"
        if layered:
            text += f"\nlayered {LAYER_FORMAT}"
        return hashlib.sha256(text.encode()).hexdigest()

    def lookup(self, key: str) -> Path | None:
        """The entry of ``key`` (an image file, or a layered image with every layer image it
        names) when there is one that only the owner or root can have written."""
        return self._entry(key, SUFFIX) or self._entry(key, LAYERED_SUFFIX)

    def _entry(self, key: str, suffix: str) -> Path | None:
        """The file of ``key`` with ``suffix`` when it is there to use: trusted, and for a layered
        image or a layer image, every layer image there and whole."""
        path = self._trusted(self.images / (key + suffix))
        if path is None:
            return None
        if suffix == LAYERED_SUFFIX:
            layers = [self.images / name for name in names_in(path)]
        elif is_layer_image(path.name):
            layers = [path]
        else:
            return path
        problem = self._layers_problem(layers)
        if problem is None:
            return path
        log.warning("Not using %s from the image store: %s (the store's next import of the image makes it again)",
                    path, problem)
        return None

    def _layers_problem(self, layers: list[Path]) -> str | None:
        """Why the layer images ``layers`` cannot be used, or None."""
        if not layers:
            return "it names no layer image"
        for layer in layers:
            if self._trusted(layer) is None:
                return f"the layer image {layer.name} is missing"
            problem = layer_problem(layer)
            if problem is not None:
                return problem
        return None

    def _trusted(self, path: Path) -> Path | None:
        """``path`` when it is a file that only the owner or root can have written (and, for a
        user, one that the store serves)."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(info.st_mode) and info.st_uid in self.trusted and not info.st_mode & 0o022:
            if not info.st_mode & 0o004 and not self.is_writer():
                return None  # sealed (seal_unmarked): not the store's to serve
            return path
        log.warning("Not using %s from the image store: it is not a file that only %s can write",
                    path, user_name(self.owner_uid))
        return None

    def publish(self, key: str, uri: str, digest: str, write: Callable[[AnonymousFile], None], *,
                layered: bool = False) -> Path:
        """The entry of ``key``: found, or written with ``write`` by this process (a layered
        image's file, with ``layered``: its layer images are added with add_layer), or by another
        importer (on any node) that this one waits for. Only the owner may call it."""
        def record(path: Path) -> None:
            info = path.stat()
            text = json.dumps({"uri": uri, "digest": digest, "size": with_layers_size(self.images, path, info),
                               "created": info.st_mtime, PUBLIC: True})
            with anonymous_file(self.meta / f"{key}.json", mode=0o600) as meta:
                os.write(meta.fd, text.encode())
                meta.commit()
        return self._publish(key, LAYERED_SUFFIX if layered else SUFFIX, uri, write, record)

    def layer(self, blob_digest: str, squash_options: str) -> str | None:
        """The name of the store's layer image of ``blob_digest``, when there is one; its use
        is marked, so that a prune (on any node) leaves it to the import that found it."""
        path = self._entry(layer_key(blob_digest, squash_options), SUFFIX)
        if path is None:
            return None
        try:
            os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
        except FileNotFoundError:
            return None  # pruned meanwhile
        return path.name

    def add_layer(self, blob_digest: str, squash_options: str, write: Callable[[AnonymousFile], None]) -> str:
        """The store's layer image of ``blob_digest``: found, or written with ``write`` (by this
        process or another importer that this one waits for); its name. Only the owner may call it."""
        return self._publish(layer_key(blob_digest, squash_options), SUFFIX, f"a layer ({blob_digest})", write).name

    def layer_file(self, name: str) -> Path:
        """The path of the layer image ``name`` (as :meth:`layer` gives it)."""
        return self.images / name

    def _publish(self, key: str, suffix: str, what: str, write: Callable[[AnonymousFile], None],
                 record: Callable[[Path], None] | None = None) -> Path:
        announced = False
        while True:
            found = self._entry(key, suffix)
            if found is not None:
                return found
            with self._lock(key).held() as holder:
                if holder is None:  # ours
                    found = self._entry(key, suffix)
                    if found is not None:
                        return found
                    return self._write(self.images / (key + suffix), write, record)
            if not announced:
                self._say(log.info, f"Waiting for {holder}, which imports {what} into the image store")
                announced = True
            time.sleep(POLL)

    def _write(self, target: Path, write: Callable[[AnonymousFile], None],
               record: Callable[[Path], None] | None) -> Path:
        """Write ``target`` (holding its lock) and then its record. A layered image whose layer
        image went (a prune on another node), or a damaged layer image, is replaced."""
        if self._trusted(target) is not None:  # there, but not an entry to use (_entry)
            target.unlink()
        with anonymous_file(target) as image:
            write(image)
            if not image.commit():
                raise HydriaError(f"{target} appeared while this import held the store's lock",
                                  hint="another account writes the image store: it must have one owner")
        if record is not None:
            record(target)
        return target

    def _lock(self, key: str) -> LinkLock:
        """Who imports ``key`` now (``LinkLock.held`` yields None while it is this process)."""
        return LinkLock(self.locks / f"{key}.lock", taken_over=lambda line, why: self._taken_over(key, line, why))

    def _taken_over(self, key: str, line: str, why: str) -> None:
        """Remove the partial files of a dead importer of ``key`` (NFS has no anonymous files):
        those that its lock's ``line`` names, and any left untouched for ``STALE_AFTER`` seconds."""
        self._say(log.warning, f"Taking over the import of {key[:12]}: {why}")
        # the names of the dead importer's partial files begin so
        dead = tuple(f".{key}{suffix}.{line.split()[0]}." for suffix in (SUFFIX, LAYERED_SUFFIX)) if line else ()
        for partial in self.images.glob(f".{key}.*.partial"):
            try:
                if partial.name.startswith(dead) \
                        or time.time() - partial.stat().st_mtime > STALE_AFTER:
                    partial.unlink()
            except FileNotFoundError:
                continue

    def listing(self) -> list[KeptImage]:
        """The images in the store, as their records say (readable by the owner and root), the
        most recently used first."""
        found = []
        for record in sorted(self.meta.glob("*.json")):
            key = record.name[:-len(".json")]
            path = self.images / (key + SUFFIX)
            try:
                if not path.exists():
                    path = self.images / (key + LAYERED_SUFFIX)
                used = path.stat().st_atime
                data = json.loads(record.read_text())
                found.append(KeptImage(key, path, data["size"], data["uri"], data["digest"], data["created"], used))
            except (OSError, ValueError, KeyError):
                continue  # removed meanwhile, or not a record hydria wrote
        return most_recent_first(found)

    def seal_unmarked(self) -> None:
        """Make the images without a ``public`` record (an older version imported them with the
        owner's credentials) readable by the owner alone. An image whose record is missing is
        sealed too once older than ``STALE_AFTER`` (its import died between the two files)."""
        self.require_writer()
        for path, info in regular_files(self.images.glob("*" + SUFFIX)):
            if not info.st_mode & 0o044 or is_layer_image(path.name):  # only ever made public
                continue
            try:
                public = json.loads((self.meta / (path.name[:-len(SUFFIX)] + ".json")).read_text()).get(PUBLIC)
            except FileNotFoundError:
                public = time.time() - info.st_mtime < STALE_AFTER  # being written now
            except (OSError, ValueError, AttributeError):
                public = False
            if public is not True:
                try:
                    path.chmod(0o600)
                except OSError as e:
                    self._say(log.warning, f"Cannot seal {path} ({e.strerror}): imported with credentials by an "
                                           "older hydria, it is still readable by anyone who learns its path")
                    continue
                self._say(log.warning, f"Sealed {path}: imported with the owner's credentials by an older "
                                       "hydria, it is no longer served to users")

    def require_writer(self) -> None:
        """Raises HydriaError unless this process runs as the store's owner."""
        if not self.is_writer():
            raise HydriaError(f"only {user_name(self.owner_uid)} writes the image store {self.root}",
                              hint=f"run it as that user: sudo -u {user_name(self.owner_uid)} hydria store ...")

    def kept_images(self) -> list[Path]:
        """The store's images: image files and layered images (not their layer images)."""
        return kept_image_files(self.images)

    def layered_in_use(self, mounted: set[str]) -> set[str]:
        """The layered images (real paths) whose layer images are all among the ``mounted`` files."""
        return layered_in_use(self.images, self.kept_images(), mounted)

    def size_on_disk(self) -> int:
        """The bytes of the store's images (a layer image that several share once)."""
        try:
            names = [name for name in os.listdir(self.images) if not name.startswith(".")]
        except FileNotFoundError:
            return 0
        return sum(info.st_size for _, info in regular_files([self.images / name for name in names]))

    def prune(self, target: int, *, dry_run: bool = False) -> list[Item]:
        """Remove the least recently used images until the store holds at most ``target`` bytes,
        never one that a container on this node has mounted or that was used within ``GRACE``
        seconds (a step on another node may have just found it). A layered image weighs the
        layer images that it alone names; they go with it, and those that several name with the
        last of them. Returns what went (or would)."""
        self.require_writer()
        if not dry_run:
            self.collect_layers()
        items, shared = weigh(self.images, self.kept_images(), None)
        loose = self.size_on_disk() - shared - sum(i.size for i in items)  # layer images named by none: no candidate

        def in_use() -> set[str]:
            mounted = mounted_images()
            return mounted | self.layered_in_use(mounted)
        chosen = victims(items, target - shared - max(loose, 0), GRACE, in_use)
        if not dry_run:
            remove(chosen)
            for gone in chosen:
                (self.meta / (gone.path.name.rpartition(".")[0] + ".json")).unlink(missing_ok=True)
            self.collect_layers()
        return chosen

    def collect_layers(self) -> None:
        """Remove the layer images that no image of the store names, none used within ``GRACE``
        seconds: an import on another node may have just found or made one for an image whose
        file it has not written yet (the store's folder has no lock that NFS keeps)."""
        in_use = mounted_images()
        now = time.time()
        for path, info in regular_files(unnamed_layers(self.images, self.kept_images())):
            if now - item(path, info).last_used >= GRACE and os.path.realpath(path) not in in_use:
                path.unlink(missing_ok=True)

    def prune_target(self, above: int, to: int) -> int | None:
        """The size to prune to when the store holds more than ``above`` bytes (settings
        STORE_PRUNE_ABOVE, STORE_PRUNE_TO; 0: four fifths of ``above``), else None."""
        if not above or self.size_on_disk() <= above:
            return None
        return to or above * 4 // 5

    def initialise(self) -> None:
        """Make the store's folders (as the owner): images readable by everyone but not listable,
        records and locks of the owner."""
        self.require_writer()
        for folder, mode in ((self.root, 0o755), (self.images, 0o711), (self.meta, 0o700), (self.locks, 0o755)):
            try:
                folder.mkdir(mode=mode, exist_ok=True)
                folder.chmod(mode)
            except OSError as e:
                raise HydriaError(f"cannot make {folder}: {e.strerror}",
                                  hint="the administrator makes the store directory for its owner: "
                                       f"install -d -o {user_name(self.owner_uid)} -m 0755 {self.root}") from None
        self.check()
        self.seal_unmarked()


def _owner_uid(root: Path, owner: str) -> int:
    if owner:
        try:
            return pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise HydriaError(f"HYDRIA_STORE_OWNER: no such user: {owner}",
                              hint="name the account that writes the image store") from None
    try:
        return root.stat().st_uid
    except OSError as e:
        raise HydriaError(f"{root} (HYDRIA_STORE_PATH): {e.strerror}",
                          hint="the administrator makes it, owned by the account that writes it") from None
