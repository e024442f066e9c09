"""Performing fstab entries inside a container's root, in its mount namespace.

Targets are resolved inside the root: ``..`` and symlinks (absolute ones relative to the root)
can never lead out of it. So are bind sources that lie inside the root (an image's VOLUMEs,
``${HYDRIA_ROOTFS}/...`` in any fstab): they are opened one component at a time without
following links, and mounted from that descriptor, so that neither a link in the image nor one
swapped in meanwhile makes the kernel bind a host path.
"""

from __future__ import annotations

import errno
import os
import stat

from hydria.errors import HydriaError
from hydria.log import Logger
from hydria.record import TYPE_CHECKING
from hydria.runtime import syscalls as sc
from hydria.runtime.fstab import MountEntry

if TYPE_CHECKING:
    from collections.abc import Sequence

log = Logger(__name__)
_LOCKED = sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC | sc.MS_NOATIME | sc.MS_NODIRATIME | sc.MS_RELATIME


class MountFailed(HydriaError):
    pass


def _escapes(path: str) -> MountFailed:
    """A path that climbs out of the root, in enroot's words (EXDEV's text) and ours."""
    return MountFailed(f"failed to resolve path: {path}: Invalid cross-device link "
                       "(it leads outside the container's root)")


def _loops(path: str) -> MountFailed:
    return MountFailed(f"failed to resolve path: {path}: too many levels of symbolic links")


def resolve_in_root(root: str, path: str) -> str:
    """The host path of ``path`` inside ``root``, following symlinks without leaving ``root``
    (a symlink's ``..`` stops at the root, as in a chroot).

    Raises:
        MountFailed: a literal ``..`` that climbs above the root, or a symlink loop.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            elif not hops:  # a literal ../ above the root, not one found in a symlink
                raise _escapes(path)
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise _loops(path)
            link = os.readlink(candidate)
            if link.startswith("/"):
                resolved = []
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def open_in_root(root: str, path: str) -> int:
    """An ``O_PATH`` descriptor of ``path`` inside ``root``, resolved as :func:`resolve_in_root`
    resolves it but on descriptors: each component is opened with ``O_NOFOLLOW`` under the one
    before, and a symlink's text is read from the link itself.

    Raises:
        MountFailed: a literal ``..`` that climbs above the root, or a symlink loop.
        OSError: a component is missing or not a directory.
    """
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    opened = [os.open(root, flags | os.O_DIRECTORY)]  # the root, then each directory below it
    parts = [p for p in path.split("/") if p not in ("", ".")]
    hops = 0
    try:
        while parts:
            part = parts.pop(0)
            if part == "..":
                if len(opened) > 1:
                    os.close(opened.pop())
                elif not hops:
                    raise _escapes(path)
                continue
            fd = os.open(part, flags, dir_fd=opened[-1])
            if not stat.S_ISLNK(os.fstat(fd).st_mode):
                opened.append(fd)
                continue
            link = os.readlink("", dir_fd=fd)
            os.close(fd)
            hops += 1
            if hops > 40:
                raise _loops(path)
            if link.startswith("/"):
                while len(opened) > 1:
                    os.close(opened.pop())
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
        return opened.pop() if len(opened) > 1 else os.dup(opened[0])
    finally:
        for fd in opened:
            os.close(fd)


def read_in_root(root: str, path: str, errors: str = "strict") -> str:
    """The text of the root's file ``path``, resolved inside the root (a link never reads a host
    file); "" where it is no plain file (a FIFO would hang the caller) or cannot be read.
    ``errors``: what bytes that are not UTF-8 become (``strict``: the file cannot be read)."""
    try:
        inside = resolve_in_root(root, path)
        if not os.path.isfile(inside):
            return ""
        with open(inside, encoding="utf-8", errors=errors) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError, MountFailed):
        return ""


def link_in_root(root: str, path: str, target: str, origin: str) -> None:
    """Make ``path`` inside ``root`` a symlink to ``target``, replacing what is there (a link an
    earlier start of a named container left in its upper directory): only the directory is
    resolved, so that link is replaced, not followed to what it points at.

    Raises:
        MountFailed: the link cannot be made; ``origin`` names who wanted it.
    """
    link = os.path.join(resolve_in_root(root, os.path.dirname(path)), os.path.basename(path))
    try:
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
    except OSError as e:
        raise MountFailed(f"cannot link {path} to {target} in the container: {e.strerror}",
                          hint=f"from {origin}") from None


def mount_entries(entries: Sequence[MountEntry], root: str, passno: int, cwd: str) -> None:
    """Mount the entries of pass ``passno``, in order. Raises MountFailed unless ``nofail``."""
    for entry in entries:
        if entry.passno != passno:
            continue
        try:
            mount_entry(entry, root, cwd)
        except (OSError, MountFailed) as e:
            message, advice = (e.message, e.hint) if isinstance(e, MountFailed) else _explain(entry, root, e)
            if "nofail" not in entry.options:
                hint = "; ".join(part for part in (f"from {entry.origin}" if entry.origin else "", advice or "") if part)
                raise MountFailed(message, hint=hint or None) from None
            if "silent" not in entry.options or "loud" in entry.options:
                log.warning("%s", message)


def _explain(entry: MountEntry, root: str, error: OSError) -> tuple[str, str | None]:
    """The message and advice for a mount the kernel refused."""
    failed = f"failed to mount: {entry.source} at {entry.target}"
    if error.errno == errno.ENOENT:
        try:
            missing = not os.path.lexists(resolve_in_root(root, entry.target))
        except MountFailed:
            missing = False
        if missing:
            example = f"{entry.source}:{entry.target}:{entry.fstype}:{','.join(('x-create=dir', *entry.options))}"
            return (f"{failed}: the mount point {entry.target} does not exist in the container",
                    f"add x-create=dir to its options (x-create=file for a file), e.g. --mount {example}")
    if error.errno == errno.EINVAL:
        _, _, data, recursive = entry.split_options()
        if data:
            return (f"{failed}: {error.strerror}",
                    f"the kernel refused the options {data!r}: check their names and values for {entry.fstype}")
        if entry.is_bind and not recursive:
            advice = (f"{entry.source} may hold other mounts, which a bind in a user namespace cannot leave out: "
                      "bind it with them (rbind)")
            return f"{failed}: {error.strerror}", advice
    return f"{failed}: {error.strerror}", None


def mount_entry(entry: MountEntry, root: str, cwd: str) -> None:
    target = resolve_in_root(root, entry.target)
    if entry.option_value("x-detach") is not None:
        if os.path.ismount(target):
            sc.umount2(target, sc.MNT_DETACH)
        return
    if entry.is_bind or entry.option_value("x-move") is not None:
        source = os.path.join(cwd, entry.source)
        inside = _inside(root, source)
        if inside is not None:
            create = entry.option_value("x-create")
            if create is not None and resolve_in_root(root, inside) == target:
                # a self-bind (an image's VOLUME) of a folder the image lacks (a layered image's
                # layers hold only what the image's own layers made): the mount point is the
                # source, made 0755 as a merged import adds it
                _create(target, create, None, entry.target, mode=0o755)
            fd = open_in_root(root, inside)
            try:
                _mount_entry(entry, f"/proc/self/fd/{fd}", target)
            finally:
                os.close(fd)
            return
        source = os.path.normpath(source)
        try:
            info = os.stat(source)
        except FileNotFoundError:
            raise MountFailed(f"failed to mount: {entry.source} at {entry.target}: No such file or directory",
                              hint=f"the source {source} does not exist on this host") from None
        except PermissionError:
            raise MountFailed(f"failed to mount: {entry.source} at {entry.target}: Permission denied",
                              hint=_unreachable_because(source)) from None
        _warn_if_unusable(entry, source, info)
        _mount_entry(entry, source, target)
    else:
        _mount_entry(entry, entry.source, target)


def _warn_if_unusable(entry: MountEntry, source: str, info: os.stat_result) -> None:
    """Say so where the container could use nothing of a bind mount's ``source``: a folder this
    user may not pass through, or a file it may neither read nor write. The mount is made all the
    same (as enroot makes it), but a program failing inside with "Permission denied" would not
    say why."""
    if stat.S_ISDIR(info.st_mode):
        unusable = not os.access(source, os.X_OK)
        what = "a folder you may not open"
    else:
        unusable = not os.access(source, os.R_OK) and not os.access(source, os.W_OK)
        what = "a file you may neither read nor write"
    if unusable and "silent" not in entry.options:
        log.warning_with_hint("mount a path you can read, or ask its owner for access",
                              "mount %s at %s: %s is %s (mode %04o): nothing in the container can use it",
                              entry.source, entry.target, source, what, info.st_mode & 0o7777)


def _unreachable_because(path: str) -> str:
    """Which folder above ``path`` this user may not pass through, and the way on."""
    folder = os.path.dirname(path)
    blocking = None
    while folder != "/":
        if os.path.isdir(folder) and not os.access(folder, os.X_OK):
            blocking = folder  # keep going up: the highest one is the one to ask about
        folder = os.path.dirname(folder)
    if blocking is None:
        return f"you may not reach {path}: mount a path you can read, or ask its owner for access"
    mode = os.stat(blocking).st_mode & 0o7777  # its owner: not known here, in the user namespace
    return (f"{blocking} (mode {mode:04o}) does not let you through to {path}: mount a path you can read, "
            "or ask its owner for access")


def _inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` when it names something in the root (``..`` still unresolved),
    else None."""
    root = root.rstrip("/")
    if path == root or path.startswith(root + "/"):
        return path[len(root):] or "/"
    return None


def _mount_entry(entry: MountEntry, source: str, target: str) -> None:
    create = entry.option_value("x-create")
    if create is not None:
        _create(target, create, source if entry.is_bind else None, entry.target)
    if entry.option_value("x-move") is not None:
        sc.mount(source, target, None, sc.MS_MOVE)
        return
    flags, propagation, data, recursive = entry.split_options()
    if entry.is_bind:
        if data:
            _unknown_bind_options(entry, data)
        sc.mount(source, target, None, sc.MS_BIND | (sc.MS_REC if recursive else 0))
        extra = flags & ~(sc.MS_BIND | sc.MS_REC | sc.MS_REMOUNT | sc.MS_SILENT)
        if extra or "rw" in entry.options:
            locked = os.statvfs(target).f_flag & _LOCKED
            if "rw" in entry.options:
                locked &= ~sc.MS_RDONLY
            sc.mount(None, target, None, sc.MS_REMOUNT | sc.MS_BIND | locked | extra)
    else:
        sc.mount(source, target, entry.fstype, flags & ~sc.MS_REC, data or None)
    if propagation:
        sc.mount(None, target, None, propagation)


COMMAND_LINE_MOUNTS = ("--mount", "--container-mounts")


def _unknown_bind_options(entry: MountEntry, data: str) -> None:
    """A bind mount takes no file system options: the kernel would ignore them (as enroot leaves it
    to). A typo on the command line (``r0`` for ``ro``) is refused; a configuration file's is
    warned about."""
    message = f"failed to mount: {entry.source} at {entry.target}: {data!r} is no option of a bind mount"
    if entry.origin in COMMAND_LINE_MOUNTS:
        raise MountFailed(message, hint="a bind mount takes ro, rw, nosuid, nodev, noexec, the propagation flags "
                                        "(private, rprivate, shared, slave, unbindable, ...) and x-create=")
    log.warning("%s (from %s): ignored", message.removeprefix("failed to mount: "), entry.origin or "an fstab")


def _create(target: str, kind: str, source: str | None, shown: str, mode: int = 0) -> None:
    """Create the mount point ``target`` (``shown``: its path in the container, for messages)
    with ``mode``: by default 0000, as enroot's mount points, which export leaves out."""
    if kind == "auto":
        kind = "file" if source and not os.path.isdir(source) else "dir"
    try:
        if kind == "dir":
            if not os.path.isdir(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.mkdir(target, mode)
                if mode:
                    os.chmod(target, mode)  # whatever the umask
        elif not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, mode))
        elif stat.S_ISDIR(os.stat(target).st_mode):
            raise MountFailed(f"failed to create file: {shown} in the container: it is a directory")
    except OSError as e:
        reason = e.strerror
        if e.errno in (errno.EEXIST, errno.ENOTDIR):  # a file where a directory of the path should be
            reason = "a part of the path is a file, not a directory"
        raise MountFailed(f"failed to create {'directory' if kind == 'dir' else 'file'}: {shown} in the container: "
                          f"{reason}") from None
