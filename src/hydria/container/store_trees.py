"""What Slurm steps read of the image store's images, kept once per node, not once per user
(docs/slurm.md, "Kept once per node: the store's images").

A user's read cache (container/read_cache.py) is the user's own: no ordinary user can show files
of theirs to another as that user's own. In Slurm the plugin runs as root, so for the store's
images (which every user may read, and which only the store's account writes) it does three
things where plugstack's ``store_trees=FOLDER`` asks for it:

* the folder holds the trees, owned by the store's account (``store_owner``), in the read cache's
  layout (``KEY/root``, ``KEY/size``, ...);
* at each step's start, root mounts the folder for the step under ``runtime_path``: read-only,
  idmapped, so that the store account's files show as the job's user's (Linux 5.12 and later;
  an overlay stacks such a tree from 5.19). A step's start stacks the tree of its store image
  from there (``StoreTrees``), as it would stack the user's own; the step's end unmounts it;
* once the step's container is set up, the plugin runs the store account's keeper (``keep_reads``,
  ``hydria store keep-reads``) at idle priority, with the reading end of a pipe whose writing end
  it gave the step's start. The start passes the files read (the reader's read log, after the
  container ran ``UNPACK_AFTER`` seconds) into the pipe, the image's key first. The keeper unpacks
  them from the store's own image file of that key, and from no other: a user who writes false
  names costs disk (bounded as a read cache is), never a file the store's image lacks.

While a step's pipe is open, the keeper marks the tree as started every ``IN_USE_EVERY`` seconds,
so that making room for another image does not remove it (a tree is never removed within
``unpack_behind.GRACE`` of its last start).
"""

from __future__ import annotations

import itertools
import os
import select

from hydria.config import Settings
from hydria.container import read_cache as rc
from hydria.record import TYPE_CHECKING, Record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

IN_USE_EVERY = 60.0  # seconds between the marks of a tree in use, well within unpack_behind.GRACE
KEY_MAX = 256  # bytes of the first line, the image's key, at most


class StoreTrees(Record):
    """What the plugin gives a step: the node's trees of the store's images, mounted for the
    step's user (``mount``), and the pipe to the store's keeper (``reads``, a descriptor)."""

    mount: str
    reads: int


def tree(trees: StoreTrees, key: str) -> str | None:
    """The tree that the node keeps of the store's image whose key is ``key``, or None."""
    path = os.path.join(trees.mount, key, rc.ROOT)
    return path if os.path.isdir(path) else None


def holds(image: str, settings: Settings) -> bool:
    """Whether ``image`` is one of the image store's images (the store the settings name)."""
    from hydria.image.kept.store import ImageStore

    store = ImageStore.configured(settings)
    return store is not None and os.path.dirname(os.path.realpath(image)) == os.path.realpath(store.images)


def keep_reads(folder: str, reads: int, settings: Settings) -> None:
    """As the store's account: keep in ``folder`` the files of a store image that a step names on
    ``reads`` (the image's key, then ``LAYER INODE`` lines), batch after batch, until the step
    closes its end (the plugin runs it at the lowest CPU and I/O priority). Returns at once when
    the key is not one of the store's images."""
    from hydria.container.unpack_behind import keep, read_batches
    from hydria.image.kept.store import ImageStore
    from hydria.runtime.rootfs import image_layers

    store = ImageStore.configured(settings)
    if store is None or not store.is_writer():
        return
    chunks = _pipe_chunks(reads)
    head = b""
    for chunk in chunks:
        head += chunk
        if b"\n" in head or len(head) > KEY_MAX:
            break
    line, newline, rest = head.partition(b"\n")
    key = os.fsdecode(line)
    image = _stored_image(store.kept_images(), key) if newline else None
    if image is None:
        return
    cache = rc.ReadCache(os.path.abspath(folder), settings.read_cache_size)
    count = len(image_layers(image))
    entry = os.path.join(cache.folder, key)
    _mark_in_use(entry)
    for read in read_batches(_marking(itertools.chain([rest], chunks), lambda: _mark_in_use(entry))):
        keep(cache, image, key, {(layer, number) for layer, number in read if layer < count})
        _mark_in_use(entry)


def _pipe_chunks(fd: int) -> Iterator[bytes]:
    """What the pipe ``fd`` gives, chunk after chunk, until its writers close it; an empty chunk
    after each ``IN_USE_EVERY`` seconds with nothing."""
    from hydria.container.unpack_behind import LOG_CHUNK

    while True:
        ready, _, _ = select.select([fd], [], [], IN_USE_EVERY)
        chunk = os.read(fd, LOG_CHUNK) if ready else b""
        if ready and not chunk:
            return
        yield chunk


def _marking(chunks: Iterable[bytes], mark: Callable[[], None]) -> Iterator[bytes]:
    """``chunks``, calling ``mark`` at each empty one (a while with nothing)."""
    for chunk in chunks:
        if not chunk:
            mark()
        yield chunk


def _mark_in_use(entry: str) -> None:
    """Mark the tree ``entry`` as started now (read_cache.entries: its last start), if it exists."""
    try:
        os.utime(entry)
    except OSError:
        return


def _stored_image(images: Iterable[Path], key: str) -> str | None:
    """The store's image whose tree is named ``key`` (read_cache.image_key), or None."""
    from hydria.errors import HydriaError

    for path in images:
        try:
            if rc.image_key(str(path)) == key:
                return str(path)
        except (OSError, HydriaError):
            continue
    return None
