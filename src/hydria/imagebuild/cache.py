"""The build cache: what each build step made, found again by the step's key.

Under ``HYDRIA_CACHE_PATH/build`` (``build.UID`` where that cache is shared by several users; the
folder is the user's own, mode 0700):

* ``steps/KEY.json``: a step's result, ``{"layer": {digest, diff_id, size} | null}``; the key
  hashes the key before it (the stage's base, then every instruction), the instruction with its
  variables expanded, and what it reads (the files of a ``COPY``, by their digests);
* ``blobs/HEX``: the layers (gzip tars), pushed and squashed as they are;
* ``trees/HEX``: the same layers as overlay folders, the lower folders of later steps;
* ``bases/HEX.sqsh``: the base images (by manifest digest), the lowest folder;
* ``outputs/KEY.sqsh``: the image files built (linked to ``-o``), for an unchanged rebuild;
* ``images/NAME.json``: the images built with ``-t NAME``, for ``hydria push NAME``;
* ``mounts/ID``: the folders of ``RUN --mount=type=cache``;
* ``work/``: the folders of builds under way.

A step counts as cached only while its blob and tree are both there; ``hydria cache prune``
removes steps with their layers (build/prune.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.image.blobs.cache import DigestMismatch, hex_of
from hydria.image.kept.prune import Item, item, regular_files
from hydria.imagebuild import idmap
from hydria.imagebuild.layers import Layer
from hydria.log import Logger
from hydria.paths import ensure_dir, is_own_private_dir
from hydria.record import Record
from hydria.trees import delete_tree

FOLDERS = ("steps", "blobs", "trees", "bases", "outputs", "images", "mounts", "work")

log = Logger(__name__)


def _short_hash(name: str) -> str:
    """A file name for any name: the first half of its SHA-256."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def key_of(*parts: object) -> str:
    """A step key: the SHA-256 of ``parts`` as JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class BuildCache:
    """The user's build cache; ``idmap``: the full ID mapping its steps run with (None: one ID),
    without which the files steps made for other owners can be neither read nor removed."""

    def __init__(self, cache_path: str, subordinate_ids: bool = True) -> None:
        self.idmap = idmap.of_this_user(subordinate_ids)
        parent = ensure_dir(cache_path, setting="HYDRIA_CACHE_PATH", private=False)
        name = "build" if is_own_private_dir(parent) else f"build.{os.geteuid()}"
        self.root = Path(ensure_dir(os.path.join(parent, name), setting="HYDRIA_CACHE_PATH"))
        for folder in FOLDERS:
            (self.root / folder).mkdir(mode=0o700, exist_ok=True)

    def blob(self, digest: str) -> Path:
        return self.root / "blobs" / hex_of(digest)

    def tree(self, diff_id: str) -> Path:
        return self.root / "trees" / hex_of(diff_id)

    def base_image(self, manifest_digest: str) -> Path:
        return self.root / "bases" / f"{hex_of(manifest_digest)}.sqsh"

    def output(self, key: str) -> Path:
        return self.root / "outputs" / f"{key}.sqsh"

    def named_image(self, name: str) -> Path:
        """Where the image built as ``-t NAME`` is remembered."""
        return self.root / "images" / f"{_short_hash(name)}.json"

    def mount_folder(self, name: str) -> Path:
        path = self.root / "mounts" / _short_hash(name)
        path.mkdir(mode=0o755, exist_ok=True)
        return path

    def work_folder(self) -> Path:
        """A new name for a step's folder, named after this node and process
        (:meth:`clear_abandoned`). Not made: the caller makes it where its removal is sure to
        follow (a Ctrl-C between making and removing it left it behind)."""
        import secrets

        return self.root / "work" / f"step.{os.uname().nodename}.{os.getpid()}.{secrets.token_hex(6)}"

    def clear_abandoned(self) -> None:
        """Remove the step folders of builds on this node whose process is gone (killed)."""
        node = os.uname().nodename
        for folder in (self.root / "work").glob(f"step.{node}.*"):
            pid = folder.name[len(f"step.{node}."):].partition(".")[0]
            if is_number(pid) and not Path(f"/proc/{pid}").exists():
                self.remove_tree(folder)

    def remove_tree(self, path: Path) -> None:
        remove_tree(path, self.idmap)

    def _step_file(self, key: str) -> Path:
        """A step's record: its key with the ID mode (a step run with one ID gave its files root
        as their owner, which a build with the full mapping must not take)."""
        return self.root / "steps" / f"{key if self.idmap is None else key_of(key, 'subordinate IDs')}.json"

    def step(self, key: str) -> tuple[bool, Layer | None]:
        """Whether step ``key`` is cached, and the layer it made (None: it changed no file). A
        step whose layer is gone counts as not cached."""
        try:
            with open(self._step_file(key)) as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return False, None
        if not isinstance(record, dict) or "layer" not in record:
            return False, None
        layer = record["layer"]
        if layer is None:
            return True, None
        try:
            found = Layer(str(layer["digest"]), str(layer["diff_id"]), int(layer["size"]))
            blob, tree = self.blob(found.digest), self.tree(found.diff_id)
        except (TypeError, KeyError, ValueError, DigestMismatch):
            return False, None
        present = blob.is_file() and tree.is_dir()
        if present:
            os.utime(blob)  # used now: hydria cache prune takes the least recently used first
        return present, found if present else None

    def remember(self, key: str, layer: Layer | None, created_by: str) -> None:
        record = {"layer": layer._asdict() if layer else None, "created_by": created_by}
        path = self._step_file(key)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(record))
        os.replace(partial, path)

    def keep_layer(self, upper: Path, blob: Path, layer: Layer) -> None:
        """Move a step's upper folder and blob (both in a work folder) to their cache names."""
        os.replace(blob, self.blob(layer.digest))
        tree = self.tree(layer.diff_id)
        if tree.is_dir():
            self.remove_tree(upper)  # the same changes made before: keep the first
        else:
            os.rename(upper, tree)

    def clear_work(self, folders: Sequence[Path]) -> None:
        """Remove step folders, to the end even if Ctrl-C comes meanwhile (then raised after). One
        that cannot be removed is said and left to the next build (:meth:`clear_abandoned`), not
        raised over the error that ended the step."""
        interrupted: KeyboardInterrupt | None = None
        pending = list(folders)
        while pending:
            try:
                if pending[0].exists():
                    self.remove_tree(pending[0])
                pending.pop(0)
            except KeyboardInterrupt as e:
                interrupted = e
            except (OSError, HydriaError) as e:
                log.warning("cannot remove a build step's folder (%s); the next build removes it", e)
                pending.pop(0)
        if interrupted is not None:
            raise interrupted


def folder_size(path: Path, ids: idmap.IdMap | None = None) -> int:
    """The bytes of the files under ``path``; counted from a namespace of the ID mapping ``ids``
    where a folder is closed to the user (one a mapped step made for another owner)."""
    closed: list[OSError] = []
    total = 0
    for folder, _, files in os.walk(path, onerror=closed.append):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    if closed and ids is not None:
        counted = ids.run(lambda: folder_size(path))
        return counted if isinstance(counted, int) else total
    return total


class Entry(Record):
    """What ``hydria cache`` lists and prunes of the build cache: a layer (its blob and its tree),
    a base image, an image file built, or a ``RUN --mount=type=cache`` folder."""

    kind: str  # "layer", "base", "output", "mount"
    item: Item
    tree: Path | None = None


def entries(cache_path: str, ids: idmap.IdMap | None = None) -> list[Entry]:
    """The build cache's entries, where this user has one (none is made); ``ids``: the ID mapping
    its steps ran with, to count what they made for other owners."""
    parent = Path(cache_path)
    roots = [parent / name for name in ("build", f"build.{os.geteuid()}") if is_own_private_dir(parent / name)]
    found: list[Entry] = []
    for root in roots:
        trees = _trees_by_blob(root)
        for path, info in regular_files((root / "blobs").iterdir()):
            tree = trees.get(path.name)
            size = info.st_size + (folder_size(tree, ids) if tree else 0)
            found.append(Entry("layer", Item(path, size, max(info.st_atime, info.st_mtime)), tree))
        for kind, folder in (("base", "bases"), ("output", "outputs")):
            for path, info in regular_files((root / folder).glob("*.sqsh")):
                found.append(Entry(kind, item(path, info)))
        for path in (root / "mounts").iterdir():
            info = path.stat()
            found.append(Entry("mount", Item(path, folder_size(path, ids), info.st_mtime), path))
    return found


def _trees_by_blob(root: Path) -> dict[str, Path]:
    """Each layer blob's tree, from the steps that made them."""
    trees = {}
    for step in (root / "steps").glob("*.json"):
        try:
            layer = json.loads(step.read_text()).get("layer")
            trees[hex_of(str(layer["digest"]))] = root / "trees" / hex_of(str(layer["diff_id"]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError, DigestMismatch):
            continue
    return trees


def remove_tree(path: Path, ids: idmap.IdMap | None) -> None:
    """Remove a folder of steps' files; what the user may not remove (files of subordinate IDs)
    from a namespace of the ID mapping ``ids``. Raises HydriaError, OSError."""
    try:
        delete_tree(path)
    except PermissionError:
        if ids is None:
            raise
        ids.run(lambda: delete_tree(path))


def remove_entries(chosen: Sequence[Entry], ids: idmap.IdMap | None) -> None:
    """Remove the entries (a layer's step then no longer counts as cached: its blob is gone)."""
    for entry in chosen:
        if entry.kind != "mount":
            entry.item.path.unlink(missing_ok=True)
        if entry.tree is not None and entry.tree.exists():
            remove_tree(entry.tree, ids)
