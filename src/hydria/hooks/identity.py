"""Who the caller is inside the container: passwd and group entries, login variables, and apt
under ``--root`` (the built-in equivalents of enroot's 10-shadow and 10-aptfix hooks)."""

from __future__ import annotations

import grp
import os
import pwd

from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING
from hydria.runtime.edits import Edits, File, Folder, StartContext
from hydria.runtime.mounts import read_in_root, resolve_in_root

if TYPE_CHECKING:
    from collections.abc import Callable

ORIGIN = "hydria's identity hook"
# What of /etc/skel a new home gets, at most: the usual dotfiles are a handful of a few KiB each.
SKELETON_FILES, SKELETON_FILE_SIZE = 64, 1 << 16
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # _PATH_STDPATH, without login.defs


def edits(context: StartContext) -> Edits:
    """Root and the caller first in the container's passwd and group files, so that ``id``,
    ``whoami`` and ``~`` work, the caller's home where the image lacks it (enroot's 10-shadow
    hook), and, under ``--root`` on a Debian-family image, apt fetching as root instead of as its
    ``_apt`` sandbox user, which a user namespace of one uid cannot switch to (enroot's 10-aptfix
    hook)."""
    root, user, remap_root = context.root, context.user, context.settings.remap_root
    if not _is(os.path.isdir, root, "/etc"):
        return Edits()
    shell = _shell(root)
    entries = [f"root:x:0:0:root:/root:{shell}"]
    groups = ["root:x:0:"]
    if not remap_root:
        entries.append(f"{user.pw_name}:x:{user.pw_uid}:{user.pw_gid}:{user.pw_gecos}:{user.pw_dir}:{shell}")
        groups.append(f"{_group_name(user.pw_gid)}:x:{user.pw_gid}:")
    files = [File(f"/etc/{name}", _first(new, read_in_root(root, f"/etc/{name}", errors="surrogateescape").splitlines()), ORIGIN)
             for name, new in (("passwd", entries), ("group", groups))]
    if remap_root and _is(os.path.isfile, root, "/etc/debian_version"):
        files.append(File("/etc/apt/apt.conf.d/hydria", b'APT::Sandbox::User "root";\n', ORIGIN))
    folders: tuple[Folder, ...] = ()
    if not context.settings.mount_home:  # else the home is bound there
        folders, skeleton = _new_home(root, "/root" if remap_root else user.pw_dir)
        files += skeleton
    return Edits(files=tuple(files), folders=folders)


def _new_home(root: str, home: str) -> tuple[tuple[Folder, ...], list[File]]:
    """As enroot's 10-shadow hook: where the image lacks the user's home, it is made (unless
    login.defs says ``CREATE_HOME no``), its mode from login.defs' ``UMASK`` (077 without), with
    the plain files of the skeleton folder (``SKEL`` in /etc/default/useradd, else /etc/skel; at
    most ``SKELETON_FILES`` of ``SKELETON_FILE_SIZE`` each: an image's own cannot fill the start)."""
    if not home.startswith("/") or _is(os.path.lexists, root, home):
        return (), []
    defs = _login_defs(root)
    if defs.get("CREATE_HOME", "yes") != "yes":
        return (), []
    try:
        umask = int(defs.get("UMASK", "077"), 8) & 0o777
    except ValueError:
        umask = 0o077
    useradd = dict(line.strip().partition("=")[::2] for line in read_in_root(root, "/etc/default/useradd").splitlines())
    skeleton = useradd.get("SKEL") or "/etc/skel"
    files = []
    try:
        folder = resolve_in_root(root, skeleton)
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    except (OSError, HydriaError):
        names = []
    for name in names[:SKELETON_FILES]:
        content = _skeleton_file(root, f"{skeleton.rstrip('/')}/{name}")
        if content is not None:
            files.append(File(f"{home}/{name}", content, ORIGIN))
    return (Folder(home, 0o777 & ~umask, ORIGIN),), files


def _login_defs(root: str) -> dict[str, str]:
    """The image's ``/etc/login.defs``: ``NAME VALUE [# comment]`` lines."""
    return {words[0]: words[1] for words in map(str.split, read_in_root(root, "/etc/login.defs").splitlines())
            if len(words) >= 2 and not words[0].startswith("#")}


def _skeleton_file(root: str, path: str) -> bytes | None:
    """The bytes of the root's plain file ``path`` (resolved inside the root), or None where it
    is something else, larger than ``SKELETON_FILE_SIZE`` or unreadable."""
    try:
        inside = resolve_in_root(root, path)
        if not os.path.isfile(inside):
            return None  # a FIFO would hang the start
        with open(inside, "rb") as handle:
            content = handle.read(SKELETON_FILE_SIZE + 1)
    except (OSError, HydriaError):
        return None
    return content if len(content) <= SKELETON_FILE_SIZE else None


def _first(new: list[str], old: list[str]) -> bytes:
    """``new`` entries, then the ``old`` ones that name neither their names nor their ids (their
    bytes as they were, UTF-8 or not)."""
    taken = {line.split(":")[0] for line in new} | {line.split(":")[2] for line in new}
    kept = [line for line in old if line.count(":") >= 2 and
            line.split(":")[0] not in taken and line.split(":")[2] not in taken]
    return ("\n".join([*new, *kept]) + "\n").encode(errors="surrogateescape")


def _is(test: Callable[[str], bool], root: str, path: str) -> bool:
    try:
        return test(resolve_in_root(root, path))
    except HydriaError:  # a link loop
        return False


def _shell(root: str) -> str:
    return "/bin/bash" if _is(os.path.exists, root, "/bin/bash") else "/bin/sh"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def login_environment(environment: dict[str, str], root: str, uid: int, user: pwd.struct_passwd) -> None:
    """Login variables that the image and the options left unset (enroot's login emulation)."""
    home = "/root" if uid == 0 else user.pw_dir
    environment.setdefault("HOME", home)
    environment.setdefault("USER", "root" if uid == 0 else user.pw_name)
    environment.setdefault("LOGNAME", user.pw_name)
    environment.setdefault("SHELL", _shell(root))
    if "PATH" not in environment:  # an image without one (a bare tarball's): as enroot's login emulation gives it
        environment["PATH"] = _login_defs(root).get("ENV_SUPATH", "").removeprefix("PATH=") or STANDARD_PATH
    environment.setdefault("TERM", "dumb")
