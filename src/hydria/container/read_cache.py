"""What containers read of an image, kept on node-local disk, so that later starts of the same
image on this node read those files at the disk's speed (docs/performance.md), while the node
keeps no more than its tasks read (a task reads a few percent of a 20 GB image).

Every start mounts its image with hydria's reader (a layered image's layer images merged into one
tree), and the overlay stacks above the mount its tree here, which holds the files that earlier
starts read, as the image has them: a file the tree holds is read from the disk, any other
through the reader. A layered image has one tree, not one per layer image: a tree above the
merged mount must show only what this image shows, and a layer's file that another image read
may be deleted or replaced by a layer above it here. The reader
names in a read log each file whose bytes read reach half its size; when the container still
runs ``UNPACK_AFTER`` seconds after its start (short starts never pay), a background process of
the lowest CPU and I/O priority (``SCHED_IDLE``) unpacks those files beside the tree with
``unsquashfs``, then moves each into the tree (a file, or a folder the tree lacks, appears at
once and whole to the containers that stack it), batch after batch. It lives no longer than the
container: it waits on a pipe whose other end only the image's FUSE daemon holds, and stops when
the daemon leaves; the next batch of that image removes what a stopped one left.

The folder (``HYDRIA_READ_CACHE_PATH``) is the user's own, mode 0700, on a local disk:

    KEY/root       what was read of the image (KEY: the image file and its superblock, or a layered
                   image's layer images: image_key)
    KEY/size       bytes the tree takes; KEY's modification time is its last start
    KEY.lock       held while files are added to KEY, or KEY is removed
    KEY.unpacking  a batch of files being unpacked
    KEY.times      the image's times of the tree's folders that a batch adds to (moves change them)
    KEY.failed     why the image could not be unpacked (it is not tried again; cache prune clears it)
    .short-of-room a start said that the disk has less free than an unpack leaves (said once)
"""

from __future__ import annotations

import os

from hydria.config import Settings
from hydria.log import Logger
from hydria.paths import is_own_private_dir, private_dir_problem
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime.layered import is_layered
from hydria.runtime.mountinfo import options_in_use
from hydria.runtime.rootfs import LAYER_SEPARATOR, OPTION_SEPARATORS, SUPERBLOCK_SIZE, image_layers
from hydria.trees import delete_tree
from hydria.units import format_size

if TYPE_CHECKING:
    from hydria.image.kept.prune import Item

UNPACK_AFTER = 5.0  # seconds a container runs before what it read is kept
ROOT, SIZE, LOCK, UNPACKING, FAILED, TIMES = "root", "size", ".lock", ".unpacking", ".failed", ".times"
SETTING = "HYDRIA_READ_CACHE_PATH"
MEMORY_TYPES = frozenset({"tmpfs", "ramfs"})
FREE_RESERVE = 0.1  # the share of its file system that an unpack leaves free
SHORT_OF_ROOM = ".short-of-room"  # marks that a start said the disk was below its reserve
# Characters that the read cache's path may not hold: what an overlay's lowerdir= option cannot
# carry (runtime/rootfs.py), and, stricter than the overlay, white space.
_OPTION_CHARACTERS = OPTION_SEPARATORS | {LAYER_SEPARATOR} | frozenset(" \t\n")

log = Logger(__name__)


class ReadCache(Record):
    """The user's folder of what containers read of images on this node, and the most it may take."""

    folder: str
    limit: int


def configured(settings: Settings) -> ReadCache | None:
    """The read cache the settings ask for, or None where it is off (a size of 0, or a path that
    an overlay option cannot carry: ``path_problem``)."""
    folder = settings.read_cache_path
    if not settings.read_cache_size or path_problem(folder):
        return None
    return ReadCache(os.path.abspath(folder), settings.read_cache_size)


def path_problem(folder: str) -> str | None:
    """Why ``folder`` cannot hold the lower layers of overlays, or None."""
    if _OPTION_CHARACTERS & set(folder):
        return "holds ',', ':', '\\' or white space, which an overlay's lower layer cannot"
    return None


def _nearest_existing(folder: str) -> str:
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return folder


def placement_problem(folder: str) -> str | None:
    """What makes ``folder`` a poor place for kept files (memory, a file system that other
    nodes share), or None for a local disk. The built-in default is used only on a local disk."""
    from hydria.runtime.filesystems import file_system_type, may_be_shared

    kind = file_system_type(os.path.realpath(_nearest_existing(folder)))
    if kind in MEMORY_TYPES:
        return f"is in memory ({kind})"
    if may_be_shared(kind):
        return f"is on a file system that other nodes may share ({kind})"
    return None


def free_and_reserve(folder: str) -> tuple[int, int]:
    """Bytes free for the user on ``folder``'s file system, and the bytes an unpack leaves free
    there (``FREE_RESERVE`` of it). Raises OSError."""
    return room(os.statvfs(_nearest_existing(folder)))


def room(space: os.statvfs_result) -> tuple[int, int]:
    """``free_and_reserve`` of a file system's figures. The reserve is a share of the part users
    may fill: blocks kept for root (ext4's reserved blocks, 5% by default, sometimes far more)
    are no user's to keep free, and counting them would leave some disks no room at all."""
    usable = space.f_blocks - (space.f_bfree - space.f_bavail)
    return space.f_bavail * space.f_frsize, int(usable * space.f_frsize * FREE_RESERVE)


def image_key(image: str) -> str:
    """The name of ``image``'s tree: for an image file, the file itself (device, inode,
    modification time, size) and a checksum of its superblock, read at each start without reading
    the image. Content alone would not do: images built alike (tar2sqfs writes no creation time)
    can share their size and whole superblock while a file differs. A copy of an image gets a tree
    of its own. For a layered image, a digest of its layer images' keys, the lowest first: the
    layered images that stack the same layer image files share a tree, whatever file names them.
    Raises OSError, InvalidImage."""
    import zlib

    with open(image, "rb") as handle:
        info = os.fstat(handle.fileno())
        superblock = handle.read(SUPERBLOCK_SIZE)
    if is_layered(superblock):
        from hashlib import sha256

        return "layers-" + sha256(" ".join(image_key(layer) for layer in image_layers(image)).encode()).hexdigest()[:32]
    return f"{info.st_dev:x}-{info.st_ino:x}-{info.st_mtime_ns:x}-{info.st_size:x}-{zlib.crc32(superblock):08x}"


def warn_once_without_room(cache: ReadCache) -> None:
    """Say once (until the disk has room again) that the cache's file system has less free than
    the share an unpack leaves: a user whose later starts stay slow learns why at a start, not
    only from ``hydria doctor``. The marker ``SHORT_OF_ROOM`` in the folder remembers it."""
    marker = os.path.join(cache.folder, SHORT_OF_ROOM)
    try:
        free, reserve = free_and_reserve(cache.folder)
        if free >= reserve:
            if os.path.lexists(marker):
                os.unlink(marker)
            return
        if os.path.lexists(marker):
            return
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        return
    log.warning("the read cache %s has %s free on its disk, less than the tenth (%s) that an unpack "
                "leaves free: images are not unpacked there for faster later starts, unless removing older unpacked "
                "images makes room (make room on that disk, or set %s to a folder on a node-local disk with room; "
                "said once until there is room)", cache.folder, format_size(free), format_size(reserve), SETTING)


def kept_tree(cache: ReadCache, key: str) -> str | None:
    """The tree that this user's folder holds of the image whose key is ``key``, or None; its use
    is recorded for pruning. A folder that is not the user's own and private is never trusted: it
    says so."""
    try:
        problem = private_dir_problem(os.lstat(cache.folder))
    except OSError:
        return None  # not made yet: the first batch makes it
    if problem is not None:
        log.warning("%s (%s) %s: what containers read is not kept there for faster reads (remove it, or set %s to a "
                    "folder of yours)", cache.folder, SETTING, problem, SETTING)
        return None
    entry = os.path.join(cache.folder, key)
    tree = os.path.join(entry, ROOT)
    try:
        os.utime(entry)
    except OSError:
        return None
    if not os.path.isdir(tree):
        return None
    if os.path.lexists(entry + TIMES):
        _restore_times_left(cache, key)
    return tree


def _restore_times_left(cache: ReadCache, key: str) -> None:
    """``restore_times`` at a start, unless a batch holds ``KEY.lock``: then its ``KEY.times`` is
    its own, not a killed batch's, and the batch sets the times itself."""
    held = lock(cache, key)
    if held is None:
        return
    try:
        restore_times(cache, key)
    finally:
        os.close(held)


def restore_times(cache: ReadCache, key: str) -> None:
    """Give the tree's folders the times that ``KEY.times`` holds (a batch killed amid its moves
    left them changed), then remove it. The caller holds ``KEY.lock``."""
    record = os.path.join(cache.folder, key + TIMES)
    try:
        with open(record) as handle:
            lines = handle.read().split("\0")[:-1]
        tree = os.path.join(cache.folder, key, ROOT)
        for line in lines:
            atime, mtime, path = line.split(" ", 2)
            os.utime(os.path.join(tree, path), ns=(int(atime), int(mtime)), follow_symlinks=False)
        os.unlink(record)
    except (OSError, ValueError):
        return


def entries(cache: ReadCache) -> list[Item]:
    """The kept trees of the user's folder (none where it is not the user's own): each folder
    ``KEY``, the bytes its tree takes, when it was last started."""
    from pathlib import Path  # not on a start's path (docs/runtime.md)

    from hydria.image.kept.prune import Item

    if not is_own_private_dir(cache.folder):
        return []
    found = []
    for name in os.listdir(cache.folder):
        path = os.path.join(cache.folder, name)
        if "." in name or not os.path.isdir(os.path.join(path, ROOT)):
            continue
        try:
            with open(os.path.join(path, SIZE)) as handle:
                size = int(handle.read())
            found.append(Item(Path(path), size, os.stat(path).st_mtime))
        except (OSError, ValueError):
            found.append(Item(Path(path), 0, 0.0))  # a folder cut short: the first to go
    return found


def in_use(cache: ReadCache) -> set[str]:
    """The entries whose tree a container of this user on this node has as its lower layer."""
    prefix = cache.folder.rstrip("/") + "/"  # and no LAYER_SEPARATOR (path_problem)
    return {os.path.realpath(os.path.dirname(lower)) for option in options_in_use("lowerdir")
            for lower in option.split(LAYER_SEPARATOR) if lower.startswith(prefix)}


def leftovers(cache: ReadCache, held: str | None = None) -> list[str]:
    """Trees that unpacks stopped before their end left, and the markers of failed unpacks, of
    images that no unpack is working on now (their lock is free, or ``held``: this process's)."""
    if not is_own_private_dir(cache.folder):
        return []
    found = []
    for name in os.listdir(cache.folder):
        key, dot, kind = name.partition(".")
        if dot and f".{kind}" in (UNPACKING, FAILED) and (key == held or not _locked(cache, key)):
            found.append(os.path.join(cache.folder, name))
    return found


def remove(path: str) -> None:
    """Remove an entry, a stopped unpack's tree or a failure marker (links never followed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        delete_tree(path)
    else:
        os.unlink(path)


def remove_entry(cache: ReadCache, path: str) -> bool:
    """Remove an image's tree unless a batch or another removal holds it; whether it went.
    Renamed first, so that no start takes it while it is being deleted."""
    held = lock(cache, os.path.basename(path))
    if held is None:
        return False
    try:
        doomed = path + UNPACKING
        os.rename(path, doomed)
        delete_tree(doomed)
        if os.path.lexists(path + TIMES):
            os.unlink(path + TIMES)
    except FileNotFoundError:
        return False
    finally:
        os.close(held)
    return True


def lock(cache: ReadCache, key: str, wait: bool = False) -> int | None:
    """Hold ``KEY.lock`` (waiting for it only with ``wait``); its descriptor, or None when another
    process holds it. Closing the descriptor releases it."""
    from hydria import locks  # here: a start takes no lock, and the module's imports would cost it

    return locks.take(os.path.join(cache.folder, key + LOCK), timeout=None if wait else 0)


def _locked(cache: ReadCache, key: str) -> bool:
    fd = lock(cache, key)
    if fd is None:
        return True
    os.close(fd)
    return False
