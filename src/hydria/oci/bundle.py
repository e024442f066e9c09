"""An OCI runtime bundle's ``config.json``, as ``hydria oci run`` runs it (Slurm's
``srun --container=BUNDLE``: docs/slurm.md has the table of fields).

Every field is either done as the OCI runtime specification says, or refused with an error that
names it: nothing in a bundle is read and then left undone. What a container of an ordinary user
cannot do (cgroup limits, other IDs than the caller's, joining another process's namespaces) is
among the refused; what keeps its process from things (capabilities, masked and read-only paths,
seccomp) is done (oci/confinement.py), since podman and Docker write it into every bundle.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Mapping
from typing import Any

from hydria.oci import confinement
from hydria.oci.fields import (
    UNDONE_HINT,
    BundleError,
    boolean_field,
    list_field,
    mapping_field,
    number_field,
    numbers_field,
    only_known,
    string_field,
    strings_field,
)
from hydria.paths import open_binary
from hydria.record import Record
from hydria.runtime import fstab
from hydria.runtime.confinement import Confinement
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
PROCESS = frozenset({"args", "env", "cwd", "terminal", "user", "rlimits", "noNewPrivileges", "capabilities"})
USER = frozenset({"uid", "gid", "umask", "additionalGids"})
LINUX = frozenset({"namespaces", "uidMappings", "gidMappings", "resources", "seccomp", "maskedPaths",
                   "readonlyPaths"})
UNLIMITED = 2**64 - 1  # an rlimit's "unlimited" in the specification (uint64), RLIM_INFINITY here
MAX_ENV = 10_000  # process.env entries: a Slurm step has a few hundred; setting each costs the others' length
HOST_NAME_MAX = 64  # bytes, as sethostname(2) takes them


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
    confinement: Confinement


def load(bundle: str, uid: int, gid: int) -> OciContainer:
    """The container that ``bundle``'s config.json describes, for the caller ``uid``/``gid``.

    Raises:
        BundleError: the file is missing or no JSON object, or a field is wrong or one that hydria
            does not do (the error names it).
    """
    path = os.path.join(bundle, CONFIG)
    try:
        with open_binary(path) as handle:
            config = json.load(handle)
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror}",
                          hint="srun --container=BUNDLE names a folder with an OCI config.json and its root "
                               "file system") from None
    except RecursionError:
        raise BundleError(f"{path} nests its JSON deeper than a config.json can be",
                          hint="write the bundle's config.json again (runc spec, podman, umoci)") from None
    except ValueError as e:
        raise BundleError(f"{path} is no JSON: {e}") from None
    if not isinstance(config, dict):
        raise BundleError(f"{path} holds {json.dumps(config)[:40]} where the OCI configuration's JSON object belongs",
                          hint="write the bundle's config.json again (runc spec, podman, umoci)")
    return _checked(config, bundle, path, uid, gid)


def _checked(config: Mapping[str, Any], bundle: str, path: str, uid: int, gid: int) -> OciContainer:
    where = f"{path}:"
    only_known(config, TOP_LEVEL, f"{where} ")
    version = config.get("ociVersion")
    if not isinstance(version, str) or not version.startswith("1."):
        raise BundleError(f"{where} ociVersion {version!r} is not a version 1 of the OCI runtime specification")
    root = mapping_field(config.get("root"), f"{where} root")
    rootfs = string_field(root.get("path"), f"{where} root.path")
    rootfs = os.path.normpath(os.path.join(bundle, rootfs))
    if not os.path.isdir(rootfs):
        raise BundleError(f"{where} root.path {rootfs} is not a folder",
                          hint="the bundle's root file system, unpacked (umoci unpack, or a folder of an image)")
    if OVERLAY_CHARACTERS & set(rootfs):
        raise BundleError(f"{where} root.path {rootfs} holds ',', ':' or '\\', which an overlay's lower "
                          "layer cannot", hint="move the bundle to a path without them")
    process = mapping_field(config.get("process"), f"{where} process")
    only_known(process, PROCESS, f"{where} process.")
    args = strings_field(process.get("args"), f"{where} process.args")
    if not args:
        raise BundleError(f"{where} process.args is empty", hint="give the program to run, or srun's command")
    if process.get("noNewPrivileges", True) is not True:
        raise BundleError(f"{where} process.noNewPrivileges is not true: hydria's containers never gain "
                          "privileges by running a program", hint=UNDONE_HINT)
    boolean_field(process.get("terminal", False), f"{where} process.terminal")  # the task's own stdio, a pty or not
    user = mapping_field(process.get("user", {}), f"{where} process.user")
    only_known(user, USER, f"{where} process.user.")
    as_root = _identity(user.get("uid", 0), uid, f"{where} process.user.uid", "uid")
    if _identity(user.get("gid", 0), gid, f"{where} process.user.gid", "gid") != as_root:
        raise BundleError(f"{where} process.user gives uid and gid of two accounts (root and the caller)")
    if numbers_field(user.get("additionalGids", []), f"{where} process.user.additionalGids"):
        raise BundleError(f"{where} process.user.additionalGids: a container keeps the groups of its caller",
                          hint=UNDONE_HINT)
    umask = user.get("umask")
    if umask is not None:
        umask = number_field(umask, f"{where} process.user.umask")
    hostname = config.get("hostname")
    linux = mapping_field(config.get("linux", {}), f"{where} linux")
    only_known(linux, LINUX, f"{where} linux.")
    namespaces = _namespaces(linux, uid, gid, as_root, where)
    if hostname is not None:
        string_field(hostname, f"{where} hostname")
        if len(hostname.encode("utf-8", "surrogateescape")) > HOST_NAME_MAX:
            raise BundleError(f"{where} hostname is {len(hostname)} characters long: a host name has at most "
                              f"{HOST_NAME_MAX} bytes")
        if "uts" not in namespaces:
            raise BundleError(f"{where} hostname needs a uts namespace in linux.namespaces")
    return OciContainer(
        rootfs=rootfs, readonly=boolean_field(root.get("readonly", False), f"{where} root.readonly"), args=args,
        env=_environment(process.get("env", []), where), cwd=_cwd(process.get("cwd", "/"), where),
        as_root=as_root, umask=umask, rlimits=_rlimits(process.get("rlimits", []), where), hostname=hostname,
        namespaces=namespaces, mounts=_mounts(config.get("mounts", []), where),
        confinement=confinement.read(process, linux, where))


def _namespaces(linux: Mapping[str, Any], uid: int, gid: int, as_root: bool, where: str) -> frozenset[str]:
    for name, own in (("uidMappings", uid), ("gidMappings", gid)):
        for index, mapping in enumerate(list_field(linux.get(name, []), f"{where} linux.{name}")):
            field = f"{where} linux.{name}[{index}]"
            mapping = mapping_field(mapping, field)
            inside = 0 if as_root else own
            if (mapping.get("containerID"), mapping.get("hostID"), mapping.get("size")) != (inside, own, 1):
                raise BundleError(f"{field} maps other IDs than the caller's ({own}) to {inside}: hydria maps "
                                  "the caller's alone", hint=UNDONE_HINT)
    made: set[str] = set()
    for index, entry in enumerate(list_field(linux.get("namespaces", []), f"{where} linux.namespaces")):
        field = f"{where} linux.namespaces[{index}]"
        entry = mapping_field(entry, field)
        kind = string_field(entry.get("type"), f"{field}.type")
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
    for index, mount in enumerate(list_field(mounts, f"{where} mounts")):
        field = f"{where} mounts[{index}]"
        mount = mapping_field(mount, field)
        target = string_field(mount.get("destination"), f"{field}.destination")
        if not target.startswith("/"):
            raise BundleError(f"{field}.destination {target!r} is not an absolute path")
        kind = string_field(mount.get("type", "none"), f"{field}.type")
        options = strings_field(mount.get("options", []), f"{field}.options")
        if kind == "bind" or {"bind", "rbind"} & set(options):
            unknown = [option for option in options if option not in BIND_OPTIONS]
            if unknown:
                raise BundleError(f"{field}.options: {unknown[0]!r} is no option of a bind mount")
            source = string_field(mount.get("source"), f"{field}.source")
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
    entries = strings_field(env, f"{where} process.env")
    if len(entries) > MAX_ENV:
        raise BundleError(f"{where} process.env has {len(entries)} entries, more than the {MAX_ENV} hydria takes",
                          hint="a program's environment holds a few hundred variables: pass data in files")
    room = os.sysconf("SC_ARG_MAX")
    if sum(len(entry.encode("utf-8", "surrogateescape")) + 1 for entry in entries) > room:
        raise BundleError(f"{where} process.env takes more than the {room} bytes a program can be given (ARG_MAX)",
                          hint="pass data in files, not in the environment")
    for index, entry in enumerate(entries):
        name, equals, value = entry.partition("=")
        if not name or not equals:
            raise BundleError(f"{where} process.env[{index}] {entry!r} is not NAME=VALUE")
        result.pop(name, None)  # the last value, in the place it was given last
        result[name] = value
    return result


def _cwd(cwd: Any, where: str) -> str:
    path = string_field(cwd, f"{where} process.cwd")
    if not path.startswith("/"):
        raise BundleError(f"{where} process.cwd {path!r} is not an absolute path")
    return path


def _rlimits(rlimits: Any, where: str) -> list[Rlimit]:
    found = []
    for index, entry in enumerate(list_field(rlimits, f"{where} process.rlimits")):
        field = f"{where} process.rlimits[{index}]"
        entry = mapping_field(entry, field)
        name = string_field(entry.get("type"), f"{field}.type")
        number = getattr(resource, name, None) if name.startswith("RLIMIT_") else None
        if not isinstance(number, int):
            raise BundleError(f"{field}.type {name!r} is no resource limit of this system")
        soft, hard = (_limit_value(entry.get(bound), f"{field}.{bound}") for bound in ("soft", "hard"))
        if _above(soft, hard):
            raise BundleError(f"{field}.soft is above its hard limit")
        found.append(Rlimit(number, soft, hard))
    return found


def _limit_value(value: Any, field: str) -> int:
    """An rlimit's bound: a number up to ``UNLIMITED``, which is ``resource.RLIM_INFINITY``."""
    number = number_field(value, field)
    if number > UNLIMITED:
        raise BundleError(f"{field} {number} is larger than a limit can be ({UNLIMITED}: unlimited)")
    return resource.RLIM_INFINITY if number == UNLIMITED else number


def _above(soft: int, hard: int) -> bool:
    return hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard)


def _identity(value: Any, own: int, field: str, kind: str) -> bool:
    """Whether ``value`` asks for root (0) rather than the caller's own ``own`` ID."""
    number = number_field(value, field)
    if number not in (0, own):
        raise BundleError(f"{field} {number}: a container runs as its caller ({kind} {own}) or as root mapped to "
                          "them (0)", hint=UNDONE_HINT)
    return number == 0 and own != 0
