"""Creating the directories hydria works in, with safe permissions and errors that say what to do.

On multi-user clusters the classic failure is ``mkdir: cannot create directory ...: Permission
denied`` with no hint of which setting points there. Here every failure names the directory, the
user, the setting that chose it, and a way out.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from hydria.errors import PathNotUsable

PRIVATE_MODE = 0o700


def ensure_dir(path: Path, *, setting: str, private: bool = True) -> Path:
    """Create ``path`` (and its parents) if needed and check that this user can use it.

    A private directory is created with mode 0700 and must be owned by the caller, so that a
    directory someone else made in a shared place such as ``/tmp`` is never trusted.

    Raises:
        PathNotUsable: the directory cannot be created, is not a directory, is not writable, or
            (when private) belongs to another user.
    """
    try:
        path.mkdir(mode=PRIVATE_MODE if private else 0o755, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as e:
        raise _unusable(path, setting, f"cannot create directory: {e.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise _unusable(path, setting, "exists but is not a directory")
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
