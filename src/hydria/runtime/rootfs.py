"""Mounting a container's root filesystem inside its user and mount namespaces.

An image file is mounted with hydria's squashfs reader, or squashfuse where the reader is not
installed (runtime/reader.py): hydria opens ``/dev/fuse`` and mounts it itself (it holds
CAP_SYS_ADMIN in its user namespace, which the daemon would lose on exec), then hands the
descriptor to ``DAEMON -f ... /dev/fd/N``. The daemon lives exactly as long as the container's
mount namespace: it moves to a mount namespace of its own and drops the mount there, so the only
reference to the file system is the container's; when the last process of the container (its
program, or Slurm tasks that joined it) has gone, the kernel aborts the FUSE connection and the
daemon exits. Writes go to an
overlay upper directory: on the runtime tmpfs for an image start, in the container's directory
for a named container. A layered image (runtime/layered.py) is one mount too: hydria's reader
serves its layer images merged into one tree (squashfuse, the fallback, mounts each, and the
overlay stacks them).
"""

from __future__ import annotations

import errno
import os
import time

from hydria.errors import HydriaError, InvalidImage, PermissionProblem, missing_file
from hydria.paths import open_binary, user_name
from hydria.record import Record
from hydria.runtime import layered
from hydria.runtime import syscalls as sc
from hydria.runtime.mountinfo import FUSE_OVERLAY, workdirs_in_use
from hydria.runtime.reader import READER, WITHOUT_FUSE, find_program, squashfs_server
from hydria.trees import delete_tree

SQUASHFS_MAGIC = b"hsqs"
SUPERBLOCK_SIZE = 96
# What the overlay's mount options cannot carry in a folder's path: no folder may hold ',' (it
# separates the options) or '\' (it escapes); ':' separates the lower layers, and fuse-overlayfs
# takes it in none of its folders.
OPTION_SEPARATORS = frozenset(",\\")
LAYER_SEPARATOR = ":"


class Container(Record):
    """Where the root filesystem comes from."""

    name: str
    image: str | None  # squashfs to mount
    # A named container's directory in the data path (its lock; with an image, the ``upper/``
    # and ``work/`` directories of its persistent writes); None for an image file or a bundle.
    home: str | None = None
    directory: str | None = None  # an unpacked root filesystem
    # The directory under an overlay of the start's own (an OCI bundle's root file system, which
    # the user may not write and other tasks share): mount points and writes never reach it.
    overlaid: bool = False


class NotSquashfs(InvalidImage):
    """A file that is there and readable, but no squashfs image."""


def check_image(path: str | os.PathLike[str]) -> str:
    """Raise HydriaError saying why ``path`` is not a usable squashfs image: missing, unreadable
    (and whose it is), a directory, not a squashfs, or shorter than its superblock says (a copy or
    download cut short); for a layered image, the same of each of its layer images. Returns the
    image's identity: its size and superblock (which holds its creation time, sizes and table
    offsets), which most rewrites change; images built alike (no creation time) may share it, so
    it never stands for the content (container/read_cache.py). A layered image's is its layers'."""
    superblock, size = _head(path)
    if layered.is_layered(superblock):
        return ";".join(check_image_file(layer) for layer in image_layers(str(path)))
    return _squashfs_identity(path, superblock, size)


def check_image_file(path: str | os.PathLike[str]) -> str:
    """check_image of one squashfs image file (a layered image's layer: never another layered one)."""
    return _squashfs_identity(path, *_head(path))


def layer_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the layer image ``path`` is not a usable squashfs image (check_image_file), or None."""
    try:
        check_image_file(path)
    except HydriaError as e:
        return e.message
    return None


def image_layers(image: str) -> list[str]:
    """The squashfs images that make ``image``: itself, or a layered image's layers, the lowest
    first. Raises InvalidImage for a layered image that cannot be read."""
    try:
        with open_binary(image) as handle:
            if not layered.is_layered(handle.read(len(layered.MAGIC))):
                return [image]
        return layered.layer_paths(image)
    except (OSError, layered.LayeredImageError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        raise InvalidImage(f"{image}: cannot read this layered image: {why}",
                           hint="import the image again") from None


def _head(path: str | os.PathLike[str]) -> tuple[bytes, int]:
    """The first bytes (a squashfs's superblock) and the size of the image file ``path``."""
    try:
        with open_binary(path) as handle:
            superblock = handle.read(SUPERBLOCK_SIZE)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        raise missing_file(os.fspath(path)) from None
    except IsADirectoryError:
        raise InvalidImage(f"{path} is a directory",
                           hint="give a squashfs image file (hydria import), or the name of a container") from None
    except PermissionError:
        info = os.stat(path)
        raise PermissionProblem(path, f"mode {info.st_mode & 0o777:04o}, owner {user_name(info.st_uid)}",
                                hint="its owner can make it readable (chmod a+r), or copy it for you") from None
    except OSError as e:
        raise HydriaError(f"cannot read {path}: {e.strerror}") from None
    return superblock, size


def _squashfs_identity(path: str | os.PathLike[str], superblock: bytes, size: int) -> str:
    if superblock[:4] != SQUASHFS_MAGIC:
        raise NotSquashfs(path, hint="not a squashfs image: make one with hydria import, or give a container name")
    used = int.from_bytes(superblock[40:48], "little")  # the superblock's bytes_used
    if size < used:
        raise InvalidImage(f"{path} is truncated ({size} of its {used} bytes)",
                           hint="a copy or download was cut short: copy or import it again")
    return f"{size} {superblock.hex()}"


def mount_squashfs(image: str, target: str, uid: int, gid: int, fast_reader: bool = True) -> None:
    """Mount the squashfs image ``image`` read-only at ``target`` (mount_images). Raises HydriaError."""
    mount_images([image], target, uid, gid, fast_reader)


def mount_images(images: list[str], target: str, uid: int, gid: int, fast_reader: bool = True,
                 keep_owners: bool = False, daemon_holds: int | None = None, read_log: int | None = None) -> list[str]:
    """Mount the squashfs images ``images`` (one image, or a layered image's layer images, the
    lowest first) read-only for an overlay's lower layers, with hydria's reader or squashfuse
    (runtime/reader.py), every file owned by ``uid``:``gid`` unless ``keep_owners`` (a build's
    namespace that maps the image's IDs). Hydria's reader serves them merged into one tree at
    ``target`` (squashfs_reader.c); squashfuse, the fallback, serves one image per daemon, each
    mounted in a folder ``target/N`` for the overlay to stack. Returns the lower layers they make,
    the topmost first: ``target``, or those folders. ``daemon_holds``: a descriptor that the daemon
    keeps open for as long as it serves (an unpack behind the container waits on it); ``read_log``:
    one where hydria's reader names the files that programs read (container/read_cache.py).
    Raises HydriaError."""
    binary = squashfs_server(fast_reader)
    owners = [] if keep_owners else ["-o", f"uid={uid},gid={gid}"]
    held = () if daemon_holds is None else (daemon_holds,)
    ours = os.path.basename(binary) == READER
    if ours or len(images) == 1:
        _mount_images_with(binary, owners, images, target, uid, gid, held, read_log if ours else None)
        return [target]
    for number, image in enumerate(images):
        os.mkdir(f"{target}/{number}")
        _mount_images_with(binary, owners, [image], f"{target}/{number}", uid, gid, held, None)
    return [f"{target}/{number}" for number in reversed(range(len(images)))]


def _mount_images_with(binary: str, owners: list[str], images: list[str], target: str, uid: int, gid: int,
                       held: tuple[int, ...], read_log: int | None) -> None:
    """One daemon of ``binary`` serving ``images`` at ``target``. Raises HydriaError."""
    try:
        # The mount's source, shown in mountinfo and df: the topmost image.
        _mount_fuse(images[-1], target, "fuse.squashfuse", sc.MS_RDONLY, uid, gid, [binary, "-f", *owners, *images],
                    held=held, read_log=read_log)
    except OSError as e:
        if e.errno == errno.ENOTCONN:  # the daemon could not read one, and said why above
            raise InvalidImage(f"{' '.join(images)}: {os.path.basename(binary)} cannot read it",
                               hint="the file is damaged or not an image hydria can mount: import it again") from None
        raise HydriaError(f"Failed to mount: {' '.join(images)}: {e.strerror}") from None


def _mount_fuse(source: str, target: str, fstype: str, flags: int, uid: int, gid: int, argv: list[str],
                capabilities: bool = False, held: tuple[int, ...] = (), read_log: int | None = None) -> None:
    """Mount a FUSE file system at ``target`` on a ``/dev/fuse`` descriptor of hydria's own and
    fork its daemon: ``argv`` plus ``/dev/fd/N``; with ``capabilities``, those of the user
    namespace, as ambient ones; ``held``: descriptors it inherits; ``read_log``: one more that it
    inherits, named in its environment (``HYDRIA_READ_LOG_FD``). Raises HydriaError, OSError."""
    try:
        fuse = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise HydriaError(f"cannot open /dev/fuse: {e.strerror}",
                          hint="an administrator must make /dev/fuse usable by users (mode 0666); " + WITHOUT_FUSE) from None
    try:
        sc.mount(source, target, fstype, sc.MS_NOSUID | sc.MS_NODEV | flags,
                 f"fd={fuse},rootmode=40000,user_id={uid},group_id={gid}")
        if os.fork() == 0:
            if read_log is not None:
                os.environ["HYDRIA_READ_LOG_FD"] = str(read_log)
                held = (*held, read_log)
            _become_daemon([*argv, f"/dev/fd/{fuse}"], (fuse, *held), target, capabilities)
    finally:
        os.close(fuse)
    os.stat(target)  # answered once the daemon serves it; ENOTCONN when it failed (it said why)


def _become_daemon(argv: list[str], kept: tuple[int, ...], target: str, capabilities: bool) -> None:
    """In the forked child: a session and a mount namespace of its own, without the FUSE mount,
    standard input and output on /dev/null, no other descriptors than ``kept`` (the FUSE one
    first) past standard error (as subprocess's close_fds: a caller's pipe must not stay open
    while the container runs), then the daemon serving the FUSE descriptor. Forked by hand, as the
    subprocess module's imports would cost every start (docs/runtime.md)."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        sc.close_descriptors_except(kept)
        for fd in kept:
            os.set_inheritable(fd, True)
        sc.unshare(sc.CLONE_NEWNS)
        sc.umount2(target, sc.MNT_DETACH)
        if capabilities:
            sc.raise_ambient_capabilities()
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def overlay_folder_problem(path: str, lower: bool) -> str | None:
    """What in ``path`` the overlay's mount options cannot carry (``lower``: as a lower layer, or
    in any folder of fuse-overlayfs's), as "holds ','"; None where nothing."""
    found = sorted((OPTION_SEPARATORS | ({LAYER_SEPARATOR} if lower else set())) & set(path))
    return f"holds {' and '.join(repr(c) for c in found)}" if found else None


def _fuse_because(refusal: str | None) -> str:
    """Why fuse-overlayfs mounts the overlay: the kernel's ``refusal``, or the setting."""
    return f"the kernel refused its overlay ({refusal}) and " if refusal else "HYDRIA_NATIVE_OVERLAYFS is off and "


def mount_overlay(lowers: list[str], upper: str, work: str, target: str, uid: int, gid: int,
                  native: bool = True) -> str:
    """The container's overlay over ``lowers`` (the topmost first): the kernel's (user namespaces allow it since Linux 5.11) unless
    ``native`` is off (``HYDRIA_NATIVE_OVERLAYFS``) or the kernel refuses it (an older kernel, an
    upper directory on NFS or FUSE), then fuse-overlayfs, as enroot does. Returns which one
    ("overlay" or "fuse-overlayfs"). Raises HydriaError."""
    lower = LAYER_SEPARATOR.join(lowers)
    refusal = None
    if native:
        try:
            sc.mount("overlay", target, "overlay", sc.MS_NOSUID | sc.MS_NODEV,
                     f"lowerdir={lower},upperdir={upper},workdir={work},userxattr,xino=off")
            return "overlay"
        except OSError as e:
            if e.errno == 16:
                raise HydriaError(f"Failed to mount the container's overlay: {e.strerror}",
                                  hint="another start of this container is running") from None
            refusal = e.strerror
    binary = find_program("fuse-overlayfs")
    if binary is None:
        raise HydriaError(f"Failed to mount the container's overlay: {_fuse_because(refusal)}fuse-overlayfs is not "
                          "installed",
                          hint="install the Debian package fuse-overlayfs (needed before Linux 5.11, and where "
                               "the data path is on NFS or another network file system)")
    for folder in (*lowers, upper, work):
        problem = overlay_folder_problem(folder, lower=True)
        if problem:
            raise HydriaError(f"Failed to mount the container's overlay: {_fuse_because(refusal)}fuse-overlayfs "
                              f"cannot take {folder}: it {problem}",
                              hint="name the container without ':' (hydria create --name), and set HYDRIA_DATA_PATH "
                                   "and HYDRIA_RUNTIME_PATH to paths without ':'")
    if refusal is not None:  # the kernel may have left a mode-0000 "work" in it: start afresh
        work += "-fuse"
        os.mkdir(work, 0o700)
    # The source names the directories, for list --fancy, the work directories and unpacked
    # images in use (runtime/mountinfo.py): a FUSE mount has none of them among its options.
    source = f"lowerdir={lower},upperdir={upper},workdir={work}"
    try:
        # With the capabilities hydria holds in the namespace, as enroot runs it: the daemon
        # creates the mode-0000 mount points and copies up files its uid could not read.
        options = f"lowerdir={lower},upperdir={upper},workdir={work},squash_to_uid={uid},squash_to_gid={gid}"
        _mount_fuse(source, target, FUSE_OVERLAY, 0, uid, gid, [binary, "-f", "-o", options], capabilities=True)
    except OSError as e:
        raise HydriaError(f"Failed to mount the container's overlay with fuse-overlayfs: {e.strerror}") from None
    return "fuse-overlayfs"


class ImageSource(Record):
    """How a start reads its image beyond its mount: the tree of the read cache
    (container/read_cache.py), stacked right above the image's mount; a descriptor the image's
    daemon keeps open; the read log that it names the files read in."""

    tree: str | None = None
    daemon_holds: int | None = None
    read_log: int | None = None


def mount_container(container: Container, area: str, uid: int, gid: int, native_overlay: bool = True,
                    fast_reader: bool = True, source: ImageSource | None = None) -> str:
    """Mount the container's root filesystem under ``area`` (a fresh directory); returns its path."""
    root = f"{area}/root"
    for name in ("lower", "upper", "work", "root"):
        os.makedirs(f"{area}/{name}")
    if container.directory is not None and not container.overlaid:
        sc.mount(str(container.directory), root, None, sc.MS_BIND | sc.MS_REC)
        return root
    if container.directory is not None:
        lowers = [container.directory]
    else:
        assert container.image is not None
        source = source or ImageSource()
        lower = f"{area}/lower"
        lowers = mount_images(image_layers(container.image), lower, uid, gid, fast_reader,
                              daemon_holds=source.daemon_holds, read_log=source.read_log)
        # Layer images that squashfuse serves one by one are named relative to the area: the
        # mount's options are a page.
        lowers = [path if path == lower else os.path.relpath(path, area) for path in lowers]
        if source.tree is not None:
            lowers.insert(0, source.tree)
    upper, work = f"{area}/upper", f"{area}/work"
    if container.home is not None:
        upper, work = f"{container.home}/upper", _instance_workdir(f"{container.home}/work")
    here = os.open(".", os.O_PATH | os.O_DIRECTORY)
    try:
        os.chdir(area)
        mount_overlay(lowers, upper, work, root, uid, gid, native_overlay)
    finally:
        os.fchdir(here)
        os.close(here)
    return root


STALE_AFTER = 60  # seconds: a work directory this old that no mount uses is left from an ended start


def _instance_workdir(parent: str) -> str:
    """A work directory of this start's own under ``parent``: several starts of one named container
    may run at once (Slurm steps), and overlay mounts must not share one. Work directories that
    this node's starts left (no mount here uses them) are removed on the way; they are named after
    the node, as only its own mounts can be seen (``tmp*``: made before names said the node)."""
    in_use = workdirs_in_use()
    node = os.uname().nodename
    with os.scandir(parent) as entries:
        for entry in entries:
            if not entry.name.startswith((f"{node}.", "tmp")):
                continue  # another node's, which may be in use there (a data path on a shared file system)
            try:
                if entry.path not in in_use and time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER:
                    delete_tree(entry.path)
            except OSError:
                continue  # another start removed it first
    while True:  # tempfile.mkdtemp without its imports (random, shutil: see docs/runtime.md)
        path = os.path.join(parent, f"{node}.{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
