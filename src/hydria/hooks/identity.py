"""Who the caller is inside the container: passwd and group entries, login variables, and apt
under ``--root`` (the built-in equivalents of enroot's 10-shadow and 10-aptfix hooks)."""

from __future__ import annotations

import grp
import os
import pwd

from hydria.errors import HydriaError
from hydria.paths import read_text
from hydria.runtime.mounts import resolve_in_root


def write_identity(root: str, user: pwd.struct_passwd, remap_root: bool) -> None:
    """Put root and the caller in the container's passwd and group files, first, so that ``id``,
    ``whoami`` and ``~`` work (the built-in equivalent of enroot's 10-shadow hook)."""
    etc = os.path.join(root, "etc")
    if not os.path.isdir(etc):
        return
    shell = _shell(root)
    entries = [f"root:x:0:0:root:/root:{shell}"]
    groups = ["root:x:0:"]
    if not remap_root:
        entries.append(f"{user.pw_name}:x:{user.pw_uid}:{user.pw_gid}:{user.pw_gecos}:{user.pw_dir}:{shell}")
        groups.append(f"{_group_name(user.pw_gid)}:x:{user.pw_gid}:")
    for name, new in (("passwd", entries), ("group", groups)):
        path = os.path.join(etc, name)
        try:
            old = read_text(path).splitlines() if os.path.exists(path) else []
            taken = {line.split(":")[0] for line in new} | {line.split(":")[2] for line in new}
            kept = [line for line in old if line.count(":") >= 2 and
                    line.split(":")[0] not in taken and line.split(":")[2] not in taken]
            with open(path, "w") as handle:
                handle.write("\n".join([*new, *kept]) + "\n")
        except OSError:
            continue  # a read-only unpacked root: leave it as it is


def apt_as_root(root: str, remap_root: bool) -> None:
    """Under ``--root`` on a Debian-family image, apt fetches as root instead of as its ``_apt``
    sandbox user, which a user namespace of one uid cannot switch to (enroot's 10-aptfix hook)."""
    if not remap_root or not os.path.isfile(os.path.join(root, "etc", "debian_version")):
        return
    try:
        conf_dir = resolve_in_root(root, "/etc/apt/apt.conf.d")
        os.makedirs(conf_dir, exist_ok=True)
        with open(os.path.join(conf_dir, "hydria"), "w") as handle:
            handle.write('APT::Sandbox::User "root";\n')
    except (OSError, HydriaError):
        return  # a read-only unpacked root: leave it as it is


def _shell(root: str) -> str:
    return "/bin/bash" if os.path.exists(os.path.join(root, "bin/bash")) else "/bin/sh"


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
    environment.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" if uid == 0
                           else "/usr/local/bin:/usr/bin:/bin")
    environment.setdefault("TERM", "dumb")
