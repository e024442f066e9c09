"""The process that keeps, behind a running container, the files that its programs read
(container/read_cache.py says why and the folder's layout).

It is forked before the container's namespaces (so it works as the user, on the host's file
systems) and leaves the start's process tree at once, so that the container's program never has
it as a child; it calls itself ``hydria-unpack IMAGE`` (``pgrep -f`` on the job's command must not
find it). It waits ``UNPACK_AFTER`` seconds, then has a worker of its own keep what the reader
names in the read log (the inode numbers of the files read, found by ``hydria-squashfuse
--paths``, unpacked by ``unsquashfs``) at the lowest CPU and I/O priority, batch after batch,
while it only waits, at normal priority: as soon as the pipe it waits on closes (the image's FUSE
daemon holds its other end, and leaves when the container's last process has), it kills the
worker and what the worker runs, however busy the node, where a worker at idle priority could
take seconds to notice. It is the reaper of everything below it (the worker's tools, killed with
it, would otherwise be left to the node's PID 1, which in some namespaces never collects them).

For an image of the image store in a Slurm step whose node keeps the store's trees
(container/store_trees.py), the worker keeps nothing itself: it passes the names on, to the
store account's process that keeps them once for the node.
"""

from __future__ import annotations

import os
import stat
import time

from hydria.container import read_cache as rc
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import syscalls as sc

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

BLOCK = 4096
SIGKILL = 9
DISK_FULL = ("No space left on device", "Disk quota exceeded")
DONE, AGAIN, FAILED = "done", "again", "failed"  # how a batch ended
GRACE = 600.0  # seconds: an image started this recently is not removed to make room
POLL = 1.0  # seconds between looks at the read log when it had nothing new
LOG_CHUNK = 1 << 20  # bytes of the read log read at once
LINE_MAX = 64  # bytes of a read log's line, at most: two numbers
OVERLAY_ATTRIBUTES = "user.overlay."  # a layer image's marks, which the reader has read: never in the tree


def start_behind(cache: rc.ReadCache, image: str, key: str, read_log: int, default_folder: bool,
                 store_reads: int | None = None) -> tuple[int, int]:
    """Fork the process that keeps the files of ``image`` (its tree's name: ``key``) that the
    container's programs read. ``read_log``: the descriptor that the reader names the files read
    in. ``default_folder``: the folder is the built-in default, used only on a local disk.
    ``store_reads``: where the store's keeper takes the names instead (store_trees.py), the
    image's key first.

    Returns the descriptor that the image's FUSE daemon must hold open while it serves
    (close-on-exec: nothing else keeps it), and the process ID of the child that forked the
    process and ended: the caller collects it (``os.waitpid``) before the container's program can
    inherit it, not here, so that the start does not wait for two forks and an exit."""
    alive_read, alive_write = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        try:
            os.close(alive_write)
            if os.fork() == 0:
                _unpacker(cache, image, key, read_log, default_folder, alive_read, store_reads)
        finally:
            os._exit(0)
    os.close(alive_read)
    return alive_write, child


def _unpacker(cache: rc.ReadCache, image: str, key: str, read_log: int, default_folder: bool, alive: int,
              store_reads: int | None) -> None:
    try:
        os.setsid()  # no terminal's signals: it ends with the container, by the pipe
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # No descriptor of the caller's: one waiting for the end of a pipe it gave hydria (srun,
        # sshd) must see it when the container's program closes its own copy.
        sc.close_descriptors_except((alive, read_log) if store_reads is None else (alive, read_log, store_reads))
        title = f"hydria-unpack {image}"
        sc.set_process_title(title)
        sc.prctl(sc.PR_SET_CHILD_SUBREAPER, 1)
        if store_reads is not None:
            os.write(store_reads, f"{key}\n".encode())  # the keeper marks the tree in use from now on
            if not _ended(alive, rc.UNPACK_AFTER):
                _while_alive(alive, lambda: _pass_on_reads(read_log, store_reads), title)
            return
        if _ended(alive, rc.UNPACK_AFTER) or (default_folder and rc.placement_problem(cache.folder)):
            return
        _while_alive(alive, lambda: _keep_reads(cache, image, key, read_log), title)
    except BaseException:  # noqa: BLE001 - a background helper: the container reads the image as before
        return


def _while_alive(alive: int, work: Callable[[], None], title: str) -> None:
    """Run ``work`` in a worker process (``title (worker)``: a group of its own, at idle priority)
    and kill the group as soon as ``alive`` closes; return when either has ended."""
    import select

    done_read, done_write = os.pipe2(os.O_CLOEXEC)  # closes when the worker ends
    worker = os.fork()
    if worker == 0:
        try:
            os.close(done_read)
            os.setpgid(0, 0)
            sc.set_process_title(f"{title} (worker)")
            sc.prctl(sc.PR_SET_PDEATHSIG, SIGKILL)  # and if this process is killed
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # idle I/O class too
            work()
        finally:
            os._exit(0)
    os.close(done_write)
    readable, _, _ = select.select([alive, done_read], [], [])
    if alive in readable:
        os.killpg(worker, SIGKILL)  # the worker is not reaped yet: its number cannot be another's
    os.waitpid(worker, 0)
    _reap_orphans()


def _reap_orphans() -> None:
    """Collect the worker's descendants that outlived it (killed with its group, they were given
    to this process, their subreaper)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _ended(alive: int, seconds: float) -> bool:
    """Whether the container ended (the pipe's other end closed) within ``seconds``."""
    import select

    readable, _, _ = select.select([alive], [], [], seconds)
    return bool(readable)


def _keep_reads(cache: rc.ReadCache, image: str, key: str, read_log: int) -> None:
    """Keep, batch after batch, the files that the reader names in ``read_log`` (container/read_cache.py),
    for as long as the container runs (the caller kills this process at its end)."""
    for read in read_batches(_growing_log(read_log)):
        keep(cache, image, key, read)


def _pass_on_reads(read_log: int, store_reads: int) -> None:
    """Pass on to the store's keeper, batch after batch, the files that the reader names in
    ``read_log``, for as long as the container runs (the caller kills this process at its end)."""
    for read in read_batches(_growing_log(read_log)):
        os.write(store_reads, "".join(f"{layer} {number}\n" for layer, number in sorted(read)).encode())


def _growing_log(read_log: int) -> Iterator[bytes]:
    """What the reader adds to ``read_log``, chunk after chunk, for ever (it polls)."""
    offset = 0
    while True:
        chunk = os.pread(read_log, LOG_CHUNK, offset)
        if not chunk:
            time.sleep(POLL)
            continue
        offset += len(chunk)
        yield chunk


def read_batches(chunks: Iterator[bytes]) -> Iterator[set[tuple[int, int]]]:
    """The files that ``chunks`` of lines ``LAYER INODE`` name (the read log's lines), a set per
    chunk that names any; a line that is not two numbers below 2**64 is skipped."""
    rest = b""
    for chunk in chunks:
        lines, _, rest = (rest + chunk).rpartition(b"\n")
        if len(rest) > LINE_MAX:
            rest = b"-"  # a line longer than two numbers is no name: it stays one to its end
        read = set()
        for line in lines.split(b"\n"):
            layer, _, number = line.partition(b" ")
            if layer.isdigit() and number.isdigit() and max(int(layer), int(number)) < 2**64:  # bytes: ASCII only
                read.add((int(layer), int(number)))
        if read:
            yield read


def keep(cache: rc.ReadCache, image: str, key: str, read: set[tuple[int, int]]) -> None:
    """Add to the tree of ``image`` (``key``) its files that ``read`` names (each by its layer
    image's place, from 0, and its inode number there, as the reader names them), those that it
    does not hold yet: unpacked beside the tree, then each moved into it (a file, or a folder the
    tree lacks, appears whole)."""
    from hydria.errors import HydriaError
    from hydria.paths import ensure_dir, is_own_private_dir
    from hydria.runtime.rootfs import image_layers

    ensure_dir(cache.folder, setting=rc.SETTING)
    if not is_own_private_dir(cache.folder):
        return  # a link another user made, even to a folder of this user's: never written through
    held = rc.lock(cache, key, wait=True)
    assert held is not None
    try:
        entry = os.path.join(cache.folder, key)
        try:
            layers = image_layers(image)
            if os.path.lexists(entry + rc.FAILED) or rc.image_key(image) != key:
                return  # not to be unpacked; or rewritten since its start: the next start names it anew
        except (OSError, HydriaError):
            return  # removed since its start
        staging = entry + rc.UNPACKING
        if os.path.lexists(staging):
            rc.remove(staging)  # what a killed batch left
        rc.restore_times(cache, key)
        tree = os.path.join(entry, rc.ROOT)
        paths = _paths(layers, read)
        files = [path for path in paths if path.size is not None and not os.path.lexists(os.path.join(tree, path.name))]
        need = sum(-(-path.size // BLOCK) * BLOCK for path in files if path.size is not None)
        if not files or not _make_room(cache, need):
            return
        os.mkdir(staging, 0o700)
        top = os.path.join(staging, rc.ROOT)
        outcome, why = DONE, ""
        for layer in sorted({path.layer for path in files}):
            if outcome == DONE:
                outcome, why = _run_unsquashfs(layers[layer], top, [path.name for path in files if path.layer == layer])
        if outcome == DONE and rc.image_key(image) != key:
            outcome = AGAIN  # rewritten while it was unpacked: not this image's files
        if outcome == DONE:
            why = _restore_attributes(top, [path for path in paths if path.size is None or path in files]) or ""
            outcome = FAILED if why else DONE
        if outcome == FAILED:
            _record_failure(entry, why)
        if outcome != DONE:
            rc.remove(staging)
            return
        if os.path.isdir(tree):
            _note_times(entry, top, tree)  # what a batch killed amid its moves must restore
            _record_size(entry, _tree_size_of(entry) + _move_into(top, tree))
            os.unlink(entry + rc.TIMES)
            rc.remove(staging)
        else:  # the first batch: the entry appears whole, with its size
            _record_size(staging, _tree_size(top))
            os.rename(staging, entry)
    finally:
        os.close(held)


def _record_failure(entry: str, why: str) -> None:
    """The marker that keeps later starts from unpacking this image again, saying when and why."""
    with open(entry + rc.FAILED, "w") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {why}\n")


class ImagePath(Record):
    """A regular file of an image (``size`` its bytes) or a folder that holds one (``size`` None),
    as the image's tree shows it: its mode, set-user-ID and set-group-ID bits included, and its
    modification time; ``name`` from the tree's top ("": the top); ``layer``: the place of the
    layer image that has it (a folder: the topmost that has it), 0 for an image file."""

    name: str
    mode: int
    size: int | None
    mtime: int
    layer: int


def _paths(layers: list[str], read: set[tuple[int, int]]) -> list[ImagePath]:
    """The regular files of the tree that ``layers`` make (an image, or a layered image's layer
    images, the lowest first) that ``read`` names (layer, inode number), every name of one with
    hard links, then the folders that hold them, as the reader finds them, then the top. A name
    that holds a line break is left out: unsquashfs's list of what to unpack could not name it.
    Raises OSError."""
    import subprocess

    from hydria.runtime.reader import installed_reader

    reader = installed_reader()
    if reader is None:
        return []
    listing = subprocess.run([reader, "--paths", *layers],
                             input="".join(f"{layer} {number}\n" for layer, number in sorted(read)).encode(),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    if listing.returncode != 0:
        return []
    found = []
    for line in listing.stdout.split(b"\0")[:-1]:
        layer, mode, size, mtime, name = line.split(b" ", 4)
        if b"\n" not in name:
            kind = int(mode, 8)
            found.append(ImagePath(os.fsdecode(name), stat.S_IMODE(kind), None if stat.S_ISDIR(kind) else int(size),
                                   int(mtime), int(layer)))
    return found


def _make_room(cache: rc.ReadCache, need: int) -> bool:
    """Remove the least recently started unpacked images (none in use, none started in the last
    minutes) until ``need`` more bytes fit the size limit and leave the disk its reserve."""
    from hydria.image.kept.prune import victims

    items = rc.entries(cache)
    total = sum(item.size for item in items)
    free, reserve = rc.free_and_reserve(cache.folder)
    # Bytes to free: for the limit, and for the disk's reserve.
    excess = max(total + need - cache.limit, need + reserve - free)
    if excess <= 0:
        return True
    chosen = victims(items, int(total - excess), GRACE, lambda: rc.in_use(cache))
    freed = sum(victim.size for victim in chosen if rc.remove_entry(cache, str(victim.path)))
    return freed >= excess


def _run_unsquashfs(image: str, target: str, names: list[str]) -> tuple[str, str]:
    """Unpack the files ``names`` of ``image`` (and the folders above them) into ``target`` as the
    user: every file the user's, extended attributes as the image has them; one that only root may
    set (``security.capability``) fails, as the tree would not show it. The outcome (DONE; AGAIN:
    the disk filled, a later batch may try again; FAILED: the image cannot be unpacked as it is)
    and, when FAILED, why. It runs in the worker's group, killed with it."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("wb", prefix=".names-", dir=os.path.dirname(target)) as listed:
        # unsquashfs reads each line as a pattern: its special characters stand for themselves
        listed.write(b"".join(_literal(os.fsencode(name)) + b"\n" for name in names))
        listed.flush()
        # -f: into the folders that an earlier layer image's files made (a layered image)
        process = subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-xattrs", "-f", "-d", target, "-ef", listed.name,
                                  image], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 check=False,
                                 # this process has no other thread: preexec_fn is safe here
                                 preexec_fn=lambda: sc.prctl(sc.PR_SET_PDEATHSIG, SIGKILL))
    lines = [line for line in process.stderr.decode(errors="replace").splitlines() if line.strip()]
    if process.returncode == 0:
        return DONE, ""
    if any(full in line for line in lines for full in DISK_FULL):
        return AGAIN, ""
    return FAILED, f"unsquashfs {image} (exit status {process.returncode}): " + " / ".join(lines[-3:])


def _literal(name: bytes) -> bytes:
    """``name`` as a pattern of unsquashfs's that matches only itself (fnmatch's escapes)."""
    return b"".join(b"\\" + bytes([c]) if c in b"\\*?[]+@!()" else bytes([c]) for c in name)


def _restore_attributes(top: str, paths: list[ImagePath]) -> str | None:
    """Give the unpacked files and folders the modes that the tree shows, set-user-ID and
    set-group-ID bits included, which unsquashfs, not running as root, leaves out (``sudo`` in a
    ``--root`` container checks its own bit), and the folders its times (a layered image's folder
    has the topmost layer's, where unsquashfs gave it the times of the layer it unpacked); and take
    off the overlay's marks (an opaque folder of a layer image), which the tree must not carry: on
    it they would hide the files of that folder that it does not hold. None, or why it could not."""
    for path in paths:
        full = os.path.join(top, path.name)
        try:
            for name in os.listxattr(full, follow_symlinks=False):
                if name.startswith(OVERLAY_ATTRIBUTES):
                    os.removexattr(full, name, follow_symlinks=False)
            if stat.S_IMODE(os.lstat(full).st_mode) != path.mode:
                os.chmod(full, path.mode)
            if path.size is None:
                os.utime(full, (path.mtime, path.mtime), follow_symlinks=False)
        except FileNotFoundError:
            continue  # a file of a folder deeper than unsquashfs unpacks, or a folder of no new file
        except OSError as e:
            return f"cannot give /{path.name} the image's mode: {e.strerror}"
    return None


def _move_into(staged: str, tree: str) -> int:
    """Move what ``staged`` holds into ``tree`` where the tree lacks it: a file, or a whole folder,
    appears at once and complete to the containers that stack the tree. A folder the tree holds
    keeps the image's times; one whose mode lets nobody write keeps what it holds (its files stay
    read through the reader). The bytes that the tree gained."""
    gained, changed = 0, False
    times = os.stat(staged)  # the image's, before moving out of it changes them
    for entry in os.scandir(staged):
        target = os.path.join(tree, entry.name)
        try:
            if not os.path.lexists(target):
                size = _tree_size(entry.path) if entry.is_dir(follow_symlinks=False) else _blocks(entry.path)
                os.rename(entry.path, target)
                gained, changed = gained + size, True
            elif entry.is_dir(follow_symlinks=False) and os.path.isdir(target) and not os.path.islink(target):
                gained += _move_into(entry.path, target)
        except OSError:
            continue  # a folder of the tree that nobody may write, or a disk error: read through the reader
    if changed:
        os.utime(tree, ns=(times.st_atime_ns, times.st_mtime_ns))
    return gained


def _note_times(entry: str, staged: str, tree: str) -> None:
    """Write ``KEY.times``: the image's times of each folder of the tree that the batch in
    ``staged`` adds to, which a move changes (``read_cache.restore_times`` sets them again)."""
    lines = []
    for folder, names, _ in os.walk(staged):
        target = os.path.join(tree, os.path.relpath(folder, staged))
        if os.path.isdir(target) and not os.path.islink(target):
            info = os.stat(folder)
            lines.append(f"{info.st_atime_ns} {info.st_mtime_ns} {os.path.relpath(target, tree)}\0")
        names[:] = [name for name in names if os.path.isdir(os.path.join(target, name))]
    with open(entry + rc.TIMES + ".new", "w") as handle:
        handle.write("".join(lines))
    os.rename(entry + rc.TIMES + ".new", entry + rc.TIMES)


def _record_size(entry: str, size: int) -> None:
    """Write the bytes that ``entry``'s tree takes into its ``size`` file, whole or not at all."""
    staged = os.path.join(entry, rc.SIZE + ".new")
    with open(staged, "w") as handle:
        handle.write(f"{size}\n")
    os.rename(staged, os.path.join(entry, rc.SIZE))


def _tree_size_of(entry: str) -> int:
    """The size that ``entry`` records, or what its tree takes where the record is lost."""
    try:
        with open(os.path.join(entry, rc.SIZE)) as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return _tree_size(os.path.join(entry, rc.ROOT))


def _blocks(path: str) -> int:
    return os.lstat(path).st_blocks * 512


def _tree_size(top: str) -> int:
    """Bytes the tree takes on disk (its blocks), without following links."""
    from hydria.trees import walk

    total = _blocks(top)
    for folder, names, files in walk(top):
        for name in (*names, *files):
            total += _blocks(os.path.join(folder, name))
    return total
