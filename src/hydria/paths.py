"""Creating the directories hydria works in, with safe permissions and errors that say what to do.

On multi-user clusters the classic failure is ``mkdir: cannot create directory ...: Permission
denied`` with no hint of which setting points there. Here every failure names the directory, the
user, the setting that chose it, and a way out.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import sys

from hydria.errors import (
    AlreadyExists,
    HydriaError,
    InvalidArgument,
    NotFound,
    PathNotUsable,
    PermissionProblem,
)
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from io import BufferedReader
    from pathlib import Path

PRIVATE_MODE = 0o700


def temp_folder(path: str) -> str:
    """``HYDRIA_TEMP_PATH`` (``path``), made where it is missing, as ``TMPDIR`` may name a folder
    that nobody made yet. Raises PathNotUsable."""
    return ensure_dir(path, setting="HYDRIA_TEMP_PATH", private=False)


def ensure_dir(path: str, *, setting: str, private: bool = True) -> str:
    """Create ``path`` (and missing parents, same mode) if needed; check this user can use it.

    A private directory is created with mode 0700 and must be owned by the caller, so that a
    directory someone else made in a shared place such as ``/tmp`` is never trusted.

    Raises:
        PathNotUsable: the directory cannot be created, is not a directory, is not writable, or
            (when private) belongs to another user.
    """
    mode = PRIVATE_MODE if private else 0o755
    path = os.path.abspath(path)
    try:
        for missing in reversed(_self_and_parents(path)):
            if not os.path.isdir(missing):
                _make_dir(missing, mode)  # parents too: ~/.cache is private as well
        info = os.stat(path)
    except FileExistsError:
        raise _unusable(path, setting, "exists but is not a directory", fix="remove it or") from None
    except OSError as e:
        raise _unusable(path, setting, f"cannot create directory: {e.strerror}") from None
    uid = os.geteuid()
    if private and info.st_uid != uid:
        raise _unusable(path, setting, f"belongs to {user_name(info.st_uid)}, not to you",
                        fix="remove it or")
    if not os.access(path, os.W_OK | os.X_OK):
        raise _unusable(path, setting, "is not writable")
    return path


def is_own_private_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory (not a link to one) of this user that nobody else can write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return private_dir_problem(info) is None


def private_dir_problem(info: os.stat_result) -> str | None:
    """Why what ``info`` (an lstat) describes is not a directory of this user that nobody else can
    write ("is not a folder", "belongs to NAME", "can be written by others"), or None."""
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return f"belongs to {user_name(info.st_uid)}"
    if info.st_mode & 0o022:
        return "can be written by others"
    return None


def process_tag() -> str:
    """This process's part of a temporary name in a folder that other nodes may share (a data
    path on a shared home, a job's directory, a shared /tmp): PIDs repeat from node to node."""
    return f"{os.uname().nodename}.{os.getpid()}"


NAME_MAX = 255  # bytes in one path component, on every file system hydria writes to
_SHORT_NAME = 120  # bytes of a name kept in a hidden sibling's name: the rest is the sibling's own


def hidden_sibling(name: str, *parts: str) -> str:
    """``.NAME.PART...``: the name of a temporary file or folder beside ``name`` (staging, trash,
    partial). A long ``name`` (past ``_SHORT_NAME`` bytes) stands there as a digest, so that
    whatever name fits a folder, the siblings its creation and removal need fit it too."""
    if len(name.encode(errors="surrogateescape")) > _SHORT_NAME:
        import hashlib

        name = "~" + hashlib.sha256(name.encode(errors="surrogateescape")).hexdigest()[:32]
    return ".".join(("", name, *parts))


def staging_file(target: Path, what: str) -> Path:
    """A new, empty file (mode 0600) beside ``target`` to write it under another name first:
    made exclusively, so that nothing another user made there first (a symlink, a file they can
    rewrite later) is written through, in an output folder others may write. The caller removes
    it, or renames it over ``target`` when complete."""
    while True:
        path = target.with_name(hidden_sibling(target.name, what, process_tag(), os.urandom(4).hex()))
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            return path
        except FileExistsError:
            continue


def umask() -> int:
    """This process's file mode creation mask (reading it means setting it: set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def writable_by_others(path: str, trusted: frozenset[int]) -> str | None:
    """The first of ``path`` (links resolved) and the folders above it that someone outside the
    ``trusted`` uids could change: one they own, or may write. A folder that is sticky and belongs
    to a trusted uid (``/tmp``) protects what others own in it, so it only has to be theirs.
    None when there is none; the path itself when it cannot be examined.

    The one rule for "only root (or an owner) can change this": the system configuration's
    commands (``config.only_root_can_write``) and the image store (``ImageStore.check``) use it."""
    path = os.path.realpath(path)
    checked = path
    while True:
        try:
            info = os.lstat(checked)
        except OSError:
            return checked
        sticky_shelter = checked != path and info.st_mode & stat.S_ISVTX
        if info.st_uid not in trusted or (info.st_mode & 0o022 and not sticky_shelter):
            return checked
        if checked == "/":
            return None
        checked = os.path.dirname(checked)


NOT_REGULAR = "not a regular file (a FIFO, a device or a socket)"


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True, create_mode: int | None = None) -> int:
    """A read-only descriptor of the regular file at ``path``, opened without waiting on a FIFO
    or a device that a user put there (every file hydria reads from a user's input, and every lock
    file, comes here); made with ``create_mode`` where missing and one is given.

    Raises:
        OSError: as ``open``; IsADirectoryError for a folder, ELOOP for a link where not
            ``follow_links``, EINVAL for anything else that is no regular file (:data:`NOT_REGULAR`).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags | (os.O_CREAT if create_mode is not None else 0), create_mode or 0)
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    raise OSError(errno.EINVAL, NOT_REGULAR, os.fspath(path))


def open_binary(path: str | os.PathLike[str], *, follow_links: bool = True) -> BufferedReader:
    """:func:`open_regular` as a file object. Raises OSError."""
    return os.fdopen(open_regular(path, follow_links=follow_links), "rb")


def read_input(path: str) -> str:
    """The text of a file a user names on the command line, once :func:`check_input_file` took it:
    as :func:`read_text`, also of a device or a pipe (/dev/null, <(...))."""
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read()


def read_text(path: str) -> str:
    """A text file's whole content, as ``Path.read_text`` (without ``pathlib`` on the start path);
    bytes that are not UTF-8 are kept as they are (``surrogateescape``), never an error. Raises
    OSError, also for what is no regular file (:func:`open_regular`)."""
    with os.fdopen(open_regular(path), encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read()


def _make_dir(path: str, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):  # else another process made it first
            raise


def _self_and_parents(path: str) -> list[str]:
    paths = [path]
    while (parent := os.path.dirname(paths[-1])) != paths[-1]:
        paths.append(parent)
    return paths


def listed(folder: str, suffix: str) -> list[str]:
    """The paths of ``folder``'s entries named ``*SUFFIX``, in name order, as ``glob`` lists them
    (hidden names left out; none for a missing folder), without the ``glob`` module's ``re``."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, name) for name in sorted(names) if name.endswith(suffix) and not name.startswith(".")]


def _unusable(path: str, setting: str, problem: str, *, fix: str = "ask an administrator to create it for you, or") -> PathNotUsable:
    user = user_name(os.geteuid())
    return PathNotUsable(
        f"{path} ({setting}) {problem} (user {user}, uid {os.geteuid()})",
        hint=f"{fix} set {setting} to a directory that {user} can write, "
             f"e.g. in /etc/hydria/hydria.conf: {setting} /tmp/hydria-$UID/{_leaf(setting)}",
    )


def _leaf(setting: str) -> str:
    return setting.removeprefix("HYDRIA_").removesuffix("_PATH").lower()


def check_input_file(path: str, option: str) -> None:
    """Raise HydriaError unless ``path``, the value of ``option``, can be read as a file (a regular
    file, or a device or pipe such as /dev/null or <(...)): saying whether it is missing, a
    directory, a named pipe (whose open would wait for a writer forever) or unreadable."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise NotFound(path, hint=f"{option} takes a file") from None
    except OSError as e:
        raise HydriaError(f"{option} {path}: {e.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise HydriaError(f"{option} {path}: Is a directory", hint=f"{option} takes a file") from None
    anonymous = path.startswith(("/dev/fd/", "/proc/self/fd/", "/dev/stdin"))  # <(...), a shell's pipe
    if stat.S_ISSOCK(info.st_mode) or stat.S_ISFIFO(info.st_mode) and not anonymous:
        raise HydriaError(f"{option} {path}: {NOT_REGULAR}", hint=f"{option} takes a file")
    if not os.access(path, os.R_OK):
        raise PermissionProblem(path, f"{option}: mode {info.st_mode & 0o777:04o}, owner {user_name(info.st_uid)}",
                                hint="its owner can make it readable (chmod a+r), or copy it for you")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def output_file(output: str | None, default: str, *, force: bool) -> Path:
    """The absolute path of a file a command writes (export, bundle): ``output`` or ``default`` in
    the current directory. Raises HydriaError when it names a directory, its directory is missing,
    or it exists and ``force`` is not given."""
    if output is not None and (not output or output.endswith("/")):
        raise InvalidArgument(output, hint="--output takes a file name")
    from pathlib import Path  # not on the start path (see docs/runtime.md)

    target = Path(output or default).absolute()
    try:
        if target.is_dir():
            raise HydriaError(f"Is a directory: {target}", hint="--output takes a file name")
        if target.exists() and not force:
            raise AlreadyExists(target, hint="use --force to replace it")
    except PermissionError:
        pass  # a folder on the way that this user may not search: the folder's check says so
    check_output_folder(target)
    return target


def check_output_folder(target: Path) -> None:
    """The folder of an output file: there, and this user may search and write it. Raises
    NotFound or PermissionProblem, with the fix."""
    hint = "choose an --output in a directory you can write"
    try:
        there = target.parent.is_dir()
    except PermissionError:  # a folder above it that this user may not search
        raise PermissionProblem(target.parent, hint=hint) from None
    if not there:
        raise NotFound(target.parent, hint="make the folder first, or choose another --output")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise PermissionProblem(target.parent, hint=hint)


def hydria_command() -> list[str]:
    """How to run this hydria again (another check, another node): its ``hydria`` script beside
    this Python, or ``python -m hydria`` when it runs from a source tree."""
    script = os.path.join(os.path.dirname(sys.executable), "hydria")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "hydria"]
