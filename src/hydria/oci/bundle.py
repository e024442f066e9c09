"""An OCI runtime bundle's ``config.json``, as ``hydria oci run`` runs it (Slurm's
``srun --container=BUNDLE``: docs/slurm.md has the table of fields).

Every field is either done as the OCI runtime specification says, or refused with an error that
names it: nothing in a bundle is read and then left undone. What a container of an ordinary user
cannot do (capabilities beyond its user namespace's, cgroup limits, seccomp profiles, joining
another process's namespaces) is among the refused.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Mapping, Sequence
from typing import Any

from hydria.errors import HydriaError
from hydria.record import Record
from hydria.runtime import fstab
from hydria.runtime.rootfs import LAYER_SEPARATOR, OPTION_SEPARATORS

CONFIG = "config.json"
# Namespaces the container always has (user, mount, cgroup), and those a setting makes.
ALWAYS = frozenset({"user", "mount", "cgroup"})
SETTING_OF_NAMESPACE = {"pid": "unshare_pid", "ipc": "unshare_ipc", "uts": "unshare_uts", "network": "unshare_net"}
# Kernel file systems that every hydria container has at these places already.
PROVIDED = frozenset({("proc", "/proc"), ("sysfs", "/sys"), ("tmpfs", "/dev"), ("devpts", "/dev/pts"),
                      ("tmpfs", "/dev/shm"), ("mqueue", "/dev/mqueue"), ("cgroup", "/sys/fs/cgroup"),
                      ("cgroup2", "/sys/fs/cgroup")})
OVERLAY_CHARACTERS = OPTION_SEPARATORS | {LAYER_SEPARATOR}
BIND_OPTIONS = frozenset(fstab.FLAGS) | frozenset(fstab.PROPAGATION)
TOP_LEVEL = frozenset({"ociVersion", "root", "process", "mounts", "hostname", "linux", "annotations"})
PROCESS = frozenset({"args", "env", "cwd", "terminal", "user", "rlimits", "noNewPrivileges"})
USER = frozenset({"uid", "gid", "umask", "additionalGids"})
LINUX = frozenset({"namespaces", "uidMappings", "gidMappings"})
UNDONE_HINT = ("hydria runs a bundle as an ordinary user's container: remove the field from config.json "
               "(docs/slurm.md lists what hydria does)")


class Rlimit(Record):
    resource: int
    soft: int
    hard: int


class OciContainer(Record):
    """What a bundle's config.json asks for, checked."""

    rootfs: str
    readonly: bool
    args: list[str]
    env: dict[str, str]  # a name given twice takes its last value (Slurm 22.05 appends the step's)
    cwd: str
    as_root: bool  # process.user.uid 0: root in the container, mapped to the caller
    umask: int | None
    rlimits: list[Rlimit]
    hostname: str | None
    namespaces: frozenset[str]  # of SETTING_OF_NAMESPACE's
    mounts: list[fstab.MountEntry]


class BundleError(HydriaError):
    pass


def load(bundle: str, uid: int, gid: int) -> OciContainer:
    """The container that ``bundle``'s config.json describes, for the caller ``uid``/``gid``.

    Raises:
        BundleError: the file is missing or no JSON object, or a field is wrong or one that hydria
            does not do (the error names it).
    """
    path = os.path.join(bundle, CONFIG)
    try:
        with open(path, "rb") as handle:
            config = json.load(handle)
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror}",
                          hint="srun --container=BUNDLE names a folder with an OCI config.json and its root "
                               "file system") from None
    except ValueError as e:
        raise BundleError(f"{path} is no JSON: {e}") from None
    return _checked(_object(config, "the file"), bundle, path, uid, gid)


def _checked(config: Mapping[str, Any], bundle: str, path: str, uid: int, gid: int) -> OciContainer:
    where = f"{path}:"
    _only(config, TOP_LEVEL, "", where)
    version = config.get("ociVersion")
    if not isinstance(version, str) or not version.startswith("1."):
        raise BundleError(f"{where} ociVersion {version!r} is not a version 1 of the OCI runtime specification")
    root = _object(config.get("root"), f"{where} root")
    rootfs = _string(root.get("path"), f"{where} root.path")
    rootfs = os.path.normpath(os.path.join(bundle, rootfs))
    if not os.path.isdir(rootfs):
        raise BundleError(f"{where} root.path {rootfs} is not a folder",
                          hint="the bundle's root file system, unpacked (umoci unpack, or a folder of an image)")
    if OVERLAY_CHARACTERS & set(rootfs):
        raise BundleError(f"{where} root.path {rootfs} holds ',', ':' or '\\', which an overlay's lower "
                          "layer cannot", hint="move the bundle to a path without them")
    process = _object(config.get("process"), f"{where} process")
    _only(process, PROCESS, "process.", where)
    args = _strings(process.get("args"), f"{where} process.args")
    if not args:
        raise BundleError(f"{where} process.args is empty", hint="give the program to run, or srun's command")
    if process.get("noNewPrivileges", True) is not True:
        raise BundleError(f"{where} process.noNewPrivileges is not true: hydria's containers never gain "
                          "privileges by running a program", hint=UNDONE_HINT)
    _boolean(process.get("terminal", False), f"{where} process.terminal")  # the task's own stdio, a pty or not
    user = _object(process.get("user", {}), f"{where} process.user")
    _only(user, USER, "process.user.", where)
    as_root = _identity(user.get("uid", 0), uid, f"{where} process.user.uid", "uid")
    if _identity(user.get("gid", 0), gid, f"{where} process.user.gid", "gid") != as_root:
        raise BundleError(f"{where} process.user gives uid and gid of two accounts (root and the caller)")
    if _ints(user.get("additionalGids", []), f"{where} process.user.additionalGids"):
        raise BundleError(f"{where} process.user.additionalGids: a container keeps the groups of its caller",
                          hint=UNDONE_HINT)
    umask = user.get("umask")
    if umask is not None:
        umask = _int(umask, f"{where} process.user.umask")
    hostname = config.get("hostname")
    namespaces = _namespaces(config.get("linux", {}), uid, gid, as_root, where)
    if hostname is not None:
        _string(hostname, f"{where} hostname")
        if "uts" not in namespaces:
            raise BundleError(f"{where} hostname needs a uts namespace in linux.namespaces")
    return OciContainer(
        rootfs=rootfs, readonly=_boolean(root.get("readonly", False), f"{where} root.readonly"), args=args,
        env=_environment(process.get("env", []), where), cwd=_cwd(process.get("cwd", "/"), where),
        as_root=as_root, umask=umask, rlimits=_rlimits(process.get("rlimits", []), where), hostname=hostname,
        namespaces=namespaces, mounts=_mounts(config.get("mounts", []), where))


def _namespaces(linux: Any, uid: int, gid: int, as_root: bool, where: str) -> frozenset[str]:
    linux = _object(linux, f"{where} linux")
    _only(linux, LINUX, "linux.", where)
    for name, own in (("uidMappings", uid), ("gidMappings", gid)):
        for index, mapping in enumerate(_list(linux.get(name, []), f"{where} linux.{name}")):
            field = f"{where} linux.{name}[{index}]"
            mapping = _object(mapping, field)
            inside = 0 if as_root else own
            if (mapping.get("containerID"), mapping.get("hostID"), mapping.get("size")) != (inside, own, 1):
                raise BundleError(f"{field} maps other IDs than the caller's ({own}) to {inside}: hydria maps "
                                  "the caller's alone", hint=UNDONE_HINT)
    made: set[str] = set()
    for index, entry in enumerate(_list(linux.get("namespaces", []), f"{where} linux.namespaces")):
        field = f"{where} linux.namespaces[{index}]"
        entry = _object(entry, field)
        kind = _string(entry.get("type"), f"{field}.type")
        if "path" in entry:
            raise BundleError(f"{field}.path: hydria makes a container's namespaces; it does not join others'",
                              hint=UNDONE_HINT)
        if kind in SETTING_OF_NAMESPACE:
            made.add(kind)
        elif kind not in ALWAYS:
            raise BundleError(f"{field}.type {kind!r} is a namespace hydria does not make", hint=UNDONE_HINT)
    return frozenset(made)


def _mounts(mounts: Any, where: str) -> list[fstab.MountEntry]:
    entries = []
    for index, mount in enumerate(_list(mounts, f"{where} mounts")):
        field = f"{where} mounts[{index}]"
        mount = _object(mount, field)
        target = _string(mount.get("destination"), f"{field}.destination")
        if not target.startswith("/"):
            raise BundleError(f"{field}.destination {target!r} is not an absolute path")
        kind = _string(mount.get("type", "none"), f"{field}.type")
        options = _strings(mount.get("options", []), f"{field}.options")
        if kind == "bind" or {"bind", "rbind"} & set(options):
            unknown = [option for option in options if option not in BIND_OPTIONS]
            if unknown:
                raise BundleError(f"{field}.options: {unknown[0]!r} is no option of a bind mount")
            source = _string(mount.get("source"), f"{field}.source")
            bind = [option for option in options if option not in ("bind", "rbind")]
            entries.append(fstab.MountEntry(source, target, "none", ("x-create=auto", "rbind" if "rbind" in options
                                                                     else "bind", *bind), origin=field))
        elif (kind, os.path.normpath(target)) in PROVIDED:
            continue  # every hydria container has it there already
        elif kind == "tmpfs":
            entries.append(fstab.MountEntry("tmpfs", target, "tmpfs", ("x-create=dir", *options), origin=field))
        else:
            raise BundleError(f"{field}.type {kind!r} at {target}: hydria mounts binds and tmpfs, and a "
                              "container's proc, sysfs, /dev and cgroups at their places", hint=UNDONE_HINT)
    return entries


def _environment(env: Any, where: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for index, entry in enumerate(_strings(env, f"{where} process.env")):
        name, equals, value = entry.partition("=")
        if not name or not equals:
            raise BundleError(f"{where} process.env[{index}] {entry!r} is not NAME=VALUE")
        result.pop(name, None)  # the last value, in the place it was given last
        result[name] = value
    return result


def _cwd(cwd: Any, where: str) -> str:
    path = _string(cwd, f"{where} process.cwd")
    if not path.startswith("/"):
        raise BundleError(f"{where} process.cwd {path!r} is not an absolute path")
    return path


def _rlimits(rlimits: Any, where: str) -> list[Rlimit]:
    found = []
    for index, entry in enumerate(_list(rlimits, f"{where} process.rlimits")):
        field = f"{where} process.rlimits[{index}]"
        entry = _object(entry, field)
        name = _string(entry.get("type"), f"{field}.type")
        number = getattr(resource, name, None) if name.startswith("RLIMIT_") else None
        if not isinstance(number, int):
            raise BundleError(f"{field}.type {name!r} is no resource limit of this system")
        found.append(Rlimit(number, _int(entry.get("soft"), f"{field}.soft"), _int(entry.get("hard"), f"{field}.hard")))
    return found


def _identity(value: Any, own: int, field: str, kind: str) -> bool:
    """Whether ``value`` asks for root (0) rather than the caller's own ``own`` ID."""
    number = _int(value, field)
    if number not in (0, own):
        raise BundleError(f"{field} {number}: a container runs as its caller ({kind} {own}) or as root mapped to "
                          "them (0)", hint=UNDONE_HINT)
    return number == 0 and own != 0


def _only(mapping: Mapping[str, Any], known: frozenset[str], prefix: str, where: str) -> None:
    for key in mapping:
        if key not in known:
            raise BundleError(f"{where} {prefix}{key} is a field hydria does not do", hint=UNDONE_HINT)


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BundleError(f"{field} is not a JSON object" if value is not None else f"{field} is missing")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise BundleError(f"{field} is not a list")
    return value


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise BundleError(f"{field} is not a non-empty string" if value is not None else f"{field} is missing")
    return value


def _strings(value: Any, field: str) -> list[str]:
    items = _list(value, field)
    for index, item in enumerate(items):
        if not isinstance(item, str) or "\0" in item:
            raise BundleError(f"{field}[{index}] is not a string")
    return items


def _int(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BundleError(f"{field} is not a number of 0 or more")
    return value


def _ints(value: Any, field: str) -> Sequence[int]:
    return [_int(item, f"{field}[{index}]") for index, item in enumerate(_list(value, field))]


def _boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise BundleError(f"{field} is not true or false")
    return value
