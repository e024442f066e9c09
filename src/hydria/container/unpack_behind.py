"""The process that unpacks an image into the read cache behind its running container
(container/read_cache.py says why and the folder's layout).

It is forked before the container's namespaces (so it works as the user, on the host's file
systems) and leaves the start's process tree at once, so that the container's program never has
it as a child; it calls itself ``hydria-unpack IMAGE`` (``pgrep -f`` on the job's command must not
find it). It waits ``UNPACK_AFTER`` seconds, then has a worker of its own do the unpack (clear
out an earlier partial tree, list the image, ``unsquashfs``) at the lowest CPU and I/O priority,
while it only waits, at normal priority: as soon as the pipe it waits on closes (the image's
FUSE daemon holds its other end, and leaves when the container's last process has), it kills the
worker and what the worker runs, however busy the node, where a worker at idle priority could
take seconds to notice. It is the reaper of everything below it (the worker's tools, killed with
it, would otherwise be left to the node's PID 1, which in some namespaces never collects them).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable

from hydria.container import read_cache as rc
from hydria.record import Record
from hydria.runtime import syscalls as sc

BLOCK = 4096
SIGKILL = 9
DISK_FULL = ("No space left on device", "Disk quota exceeded")
DONE, AGAIN, FAILED = "done", "again", "failed"  # how an unpack ended
GRACE = 600.0  # seconds: an image started this recently is not removed to make room
# unsquashfs's complaint about the device nodes that only root makes (an exit status of 2): they
# are left out, as /dev comes from the host and every mount is nodev.
DEVICE_NODE_COMPLAINT = r"create_inode: could not create (character|block) device .*, because you're not superuser!"


def start_behind(cache: rc.ReadCache, image: str, keys: dict[str, str], default_folder: bool) -> int:
    """Fork the process that unpacks ``image``'s squashfs images that ``keys`` names (image ->
    key: itself, or layer images of a layered image), one after the other, once its container has
    run for a while. Returns the descriptor that the image's FUSE daemon must hold open while it
    serves (close-on-exec: nothing else keeps it). ``default_folder``: the folder is the built-in
    default, used only on a local disk file system."""
    alive_read, alive_write = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        try:
            os.close(alive_write)
            if os.fork() == 0:
                _unpacker(cache, image, keys, default_folder, alive_read)
        finally:
            os._exit(0)
    os.close(alive_read)
    os.waitpid(child, 0)
    return alive_write


def _unpacker(cache: rc.ReadCache, image: str, keys: dict[str, str], default_folder: bool, alive: int) -> None:
    try:
        os.setsid()  # no terminal's signals: it ends with the container, by the pipe
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # No descriptor of the caller's: one waiting for the end of a pipe it gave hydria (srun,
        # sshd) must see it when the container's program closes its own copy.
        sc.close_descriptors_except((alive,))
        title = f"hydria-unpack {image}"
        sc.set_process_title(title)
        sc.prctl(sc.PR_SET_CHILD_SUBREAPER, 1)
        if _ended(alive, rc.UNPACK_AFTER) or (default_folder and rc.placement_problem(cache.folder)):
            return
        _while_alive(alive, lambda: _unpack_all(cache, keys), title)
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


def _unpack_all(cache: rc.ReadCache, keys: dict[str, str]) -> None:
    for image, key in keys.items():
        _unpack(cache, image, key)


def _unpack(cache: rc.ReadCache, image: str, key: str) -> None:
    from hydria.paths import ensure_dir, is_own_private_dir

    ensure_dir(cache.folder, setting=rc.SETTING)
    if not is_own_private_dir(cache.folder):
        return  # a link another user made, even to a folder of this user's: never written through
    if rc.lock(cache, key) is None:
        return  # another start unpacks it; ours is held until this process ends
    entry = os.path.join(cache.folder, key)
    if os.path.lexists(entry) or os.path.lexists(entry + rc.FAILED):
        return
    for leftover in rc.leftovers(cache, held=key):
        if not leftover.endswith(rc.FAILED):
            rc.remove(leftover)
    listing = _listing(image)
    if isinstance(listing, str):  # not to be unpacked as it is: never tried again for this image
        _record_failure(entry, listing)
        return
    if not _make_room(cache, listing.size):
        return
    staging = entry + rc.UNPACKING
    os.mkdir(staging, 0o700)
    top = os.path.join(staging, rc.ROOT)
    outcome, why = _run_unsquashfs(image, top)
    if outcome == DONE and rc.image_key(image) != key:
        outcome = AGAIN  # rewritten while it was unpacked: not this image's tree
    if outcome == DONE:
        why = _restore_special_bits(top, listing.special_bits) or _make_whiteouts(top, listing.whiteouts) or ""
        outcome = FAILED if why else DONE
    if outcome != DONE:
        rc.remove(staging)
        if outcome == FAILED:
            _record_failure(entry, why)
        return
    with open(os.path.join(staging, rc.SIZE), "w") as handle:
        handle.write(f"{_tree_size(os.path.join(staging, rc.ROOT))}\n")
    os.rename(staging, entry)


def _record_failure(entry: str, why: str) -> None:
    """The marker that keeps later starts from unpacking this image again, saying when and why."""
    with open(entry + rc.FAILED, "w") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {why}\n")


class Listing(Record):
    """What ``unsquashfs -lln`` says of an image: the bytes its files take once unpacked (whole
    blocks), the set-user-ID and set-group-ID bits of each path that has them, and the
    character devices 0/0 (a layer image's deletions: docs/import.md), all paths relative to the
    tree's top, which unsquashfs leaves out when it does not run as root."""

    size: int
    special_bits: dict[str, int]
    whiteouts: list[str]


# One entry of `unsquashfs -lln`: type and permissions, uid/gid, size (or major, minor), date,
# time, the path under squashfs-root (a link adds " -> TARGET"). A name or link target that
# holds a line break makes a line that is none of these.
WHITEOUT = rb"0, *0"  # the size field of a character device 0/0
ENTRY = rb"([-dlcbps])([-rwxsStT]{9}) \d+/\d+ +(\d+|\d+, *\d+) \d{4}-\d\d-\d\d \d\d:\d\d squashfs-root(/.*)?\n?"


def _special_bits(permissions: bytes) -> int:
    """The set-user-ID and set-group-ID bits of ``ls``-style permissions (``rwsr-sr-x``)."""
    return ((stat.S_ISUID if permissions[2:3] in (b"s", b"S") else 0)
            | (stat.S_ISGID if permissions[5:6] in (b"s", b"S") else 0))


def _listing(image: str) -> Listing | str:
    """The image's ``Listing``, read as it comes (an image of a million files lists a hundred
    megabytes); or, where unsquashfs cannot list it, or a name holds a line break (which would
    make its modes ambiguous), why."""
    import re  # not on a start's path
    import subprocess
    import tempfile

    one_entry = re.compile(ENTRY)
    total, odd = 0, b""  # odd: the first line that is no entry
    special: dict[str, int] = {}
    whiteouts: list[str] = []
    with tempfile.TemporaryFile() as errors:  # a file: a pipe left unread could stall unsquashfs
        with subprocess.Popen(["unsquashfs", "-lln", image], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=errors) as listing:
            assert listing.stdout is not None
            for line in listing.stdout:
                entry = one_entry.fullmatch(line)
                if entry is None:
                    odd = odd or line
                    continue
                kind, permissions, size, path = entry.groups()
                if kind == b"-":
                    total += -(-int(size) // BLOCK) * BLOCK
                elif kind != b"c" and kind != b"b":
                    total += BLOCK
                if kind == b"c" and re.fullmatch(WHITEOUT, size):
                    whiteouts.append(os.fsdecode((path or b"/")[1:]))
                bits = _special_bits(permissions)
                if bits and kind in (b"-", b"d"):
                    special[os.fsdecode((path or b"/")[1:])] = bits
        if listing.returncode == 0:
            if odd:
                return (f"unsquashfs -lln {image}: a name or link target holds a line break ({odd[:200]!r}): "
                        "its modes cannot be told apart from the listing")
            return Listing(total, special, whiteouts)
        errors.seek(0)
        lines = [line for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
    return f"unsquashfs -lln {image} (exit status {listing.returncode}): " + " / ".join(lines[-3:])


def _restore_special_bits(top: str, special: dict[str, int]) -> str | None:
    """Give the unpacked tree's files and folders the set-user-ID and set-group-ID bits that the
    image has and unsquashfs, not running as root, left out: a later start must show what the
    image does (``sudo`` in a ``--root`` container checks its own bit). The user owns each of
    them, so may set both. None, or why it could not."""
    for path, bits in special.items():
        full = os.path.join(top, path)
        try:
            info = os.lstat(full)
            if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
                os.chmod(full, stat.S_IMODE(info.st_mode) | bits)
        except OSError as e:
            return f"cannot restore the mode of /{path}: {e.strerror}"
    return None


def _make_whiteouts(top: str, whiteouts: list[str]) -> str | None:
    """Make the deletions of a layer image that unsquashfs, not running as root, leaves out: a
    character device 0/0, which the kernel lets any user make (Linux 5.8) for the overlay that
    stacks the tree. None, or why it could not."""
    for path in whiteouts:
        full = os.path.join(top, path)
        try:
            folder = os.path.dirname(full)
            mode = stat.S_IMODE(os.lstat(folder).st_mode)  # the image's: a folder of mode 0555 too
            writable = mode | stat.S_IWUSR | stat.S_IXUSR
            if mode != writable:
                os.chmod(folder, writable)
            try:
                os.mknod(full, stat.S_IFCHR | 0o600, os.makedev(0, 0))
            finally:
                if mode != writable:
                    os.chmod(folder, mode)
        except OSError as e:
            return f"cannot make the deletion /{path} (a character device 0/0): {e.strerror}"
    return None


def _make_room(cache: rc.ReadCache, need: int) -> bool:
    """Remove the least recently started unpacked images (none in use, none started in the last
    minutes) until ``need`` more bytes fit the size limit and leave the disk its reserve."""
    from hydria.image.prune import victims

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


def _run_unsquashfs(image: str, target: str) -> tuple[str, str]:
    """Unpack ``image`` into ``target`` as the user: every file the user's, no device nodes (the
    host's /dev serves), extended attributes as the image has them; one that only root may set
    (``security.capability``) fails the unpack, as the tree would not show it. The outcome (DONE;
    AGAIN: the disk filled, a later start may try again; FAILED: the image cannot be unpacked as
    it is) and, when FAILED, why. It runs in the worker's group, killed with it."""
    import re
    import subprocess

    process = subprocess.Popen(["unsquashfs", "-no-progress", "-quiet", "-xattrs", "-d", target, image],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               # this process has no other thread: preexec_fn is safe here
                               preexec_fn=lambda: sc.prctl(sc.PR_SET_PDEATHSIG, SIGKILL))  # noqa: PLW1509
    _, errors = process.communicate()
    status = process.returncode
    lines = [line for line in errors.decode(errors="replace").splitlines() if line.strip()]
    if status == 0 or (status == 2 and lines and all(re.fullmatch(DEVICE_NODE_COMPLAINT, line) for line in lines)):
        return DONE, ""
    if any(full in line for line in lines for full in DISK_FULL):
        return AGAIN, ""
    return FAILED, f"unsquashfs {image} (exit status {status}): " + " / ".join(lines[-3:])


def _tree_size(top: str) -> int:
    """Bytes the tree takes on disk (its blocks), without following links."""
    from hydria.trees import walk

    total = 0
    for folder, names, files in walk(top):
        for name in (*names, *files):
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total
