"""Creating the directories hydria works in, with safe permissions and errors that say what to do.

On multi-user clusters the classic failure is ``mkdir: cannot create directory ...: Permission
denied`` with no hint of which setting points there. Here every failure names the directory, the
user, the setting that chose it, and a way out.
"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

from hydria.errors import HydriaError, PathNotUsable

PRIVATE_MODE = 0o700


def ensure_dir(path: Path, *, setting: str, private: bool = True) -> Path:
    """Create ``path`` (and missing parents, same mode) if needed; check this user can use it.

    A private directory is created with mode 0700 and must be owned by the caller, so that a
    directory someone else made in a shared place such as ``/tmp`` is never trusted.

    Raises:
        PathNotUsable: the directory cannot be created, is not a directory, is not writable, or
            (when private) belongs to another user.
    """
    mode = PRIVATE_MODE if private else 0o755
    try:
        for missing in reversed([path, *path.parents]):
            if not missing.is_dir():
                missing.mkdir(mode=mode, exist_ok=True)  # parents too: ~/.cache is private as well
        info = path.stat()
    except FileExistsError:
        raise _unusable(path, setting, "exists but is not a directory", fix="remove it or") from None
    except OSError as e:
        raise _unusable(path, setting, f"cannot create directory: {e.strerror}") from None
    uid = os.geteuid()
    if private and info.st_uid != uid:
        raise _unusable(path, setting, f"belongs to {_user_name(info.st_uid)}, not to you",
                        fix="remove it or")
    if not os.access(path, os.W_OK | os.X_OK):
        raise _unusable(path, setting, "is not writable")
    return path


def _unusable(path: Path, setting: str, problem: str, *, fix: str = "ask an administrator to create it for you, or") -> PathNotUsable:
    user = _user_name(os.geteuid())
    return PathNotUsable(
        f"{path} ({setting}) {problem} (user {user}, uid {os.geteuid()})",
        hint=f"{fix} set {setting} to a directory that {user} can write, "
             f"e.g. in /etc/hydria/hydria.conf: {setting} /tmp/hydria-$UID/{_leaf(setting)}",
    )


def _leaf(setting: str) -> str:
    return setting.removeprefix("HYDRIA_").removesuffix("_PATH").lower()


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def delete_tree(path: Path) -> None:
    """Delete a tree, first making its directories accessible: overlay work directories and
    images can hold directories without owner permissions."""
    os.chmod(path, 0o700)
    for directory, subdirectories, _ in os.walk(path):
        for name in subdirectories:
            child = os.path.join(directory, name)
            if not os.path.islink(child):
                os.chmod(child, 0o700)
    import shutil

    shutil.rmtree(path)


def output_file(output: str | None, default: str, *, force: bool) -> Path:
    """The absolute path of a file a command writes (export, bundle): ``output`` or ``default`` in
    the current directory. Raises HydriaError when it names a directory, its directory is missing,
    or it exists and ``force`` is not given."""
    if output is not None and (not output or output.endswith("/")):
        raise HydriaError(f"Invalid argument: {output}", hint="--output takes a file name")
    target = Path(output or default).absolute()
    if target.is_dir():
        raise HydriaError(f"Is a directory: {target}")
    if target.exists() and not force:
        raise HydriaError(f"File already exists: {target}", hint="use --force to overwrite it")
    if not target.parent.is_dir():
        raise HydriaError(f"No such file or directory: {target.parent}")
    return target


def hydria_command() -> list[str]:
    """How to run this hydria again (another check, another node): its ``hydria`` script beside
    this Python, or ``python -m hydria`` when it runs from a source tree."""
    script = Path(sys.executable).parent / "hydria"
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", "hydria"]
