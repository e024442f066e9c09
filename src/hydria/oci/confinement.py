"""The fields of a bundle's config.json that keep its process from things: ``process.capabilities``,
``linux.maskedPaths``, ``linux.readonlyPaths``, ``linux.seccomp``, and ``linux.resources`` (empty
only: cgroup limits are the Slurm job's). Read into what the container applies
(runtime/confinement.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydria.oci.fields import UNDONE_HINT, BundleError, mapping_field, string_field, strings_field
from hydria.oci.seccomp_profile import compile_filter
from hydria.runtime.confinement import CapabilitySets, Confinement

# Linux's capabilities, by number (linux/capability.h).
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE")
NUMBER_OF_CAPABILITY = {f"CAP_{name}": number for number, name in enumerate(CAPABILITIES)}
SETS = ("bounding", "effective", "permitted", "inheritable", "ambient")


def read(process: Mapping[str, Any], linux: Mapping[str, Any], where: str) -> Confinement:
    """What ``process`` and ``linux`` (checked for known keys already) ask to confine.

    Raises:
        BundleError: a field is wrong, or asks for what hydria does not do.
    """
    resources = mapping_field(linux.get("resources", {}), f"{where} linux.resources")
    if resources:
        raise BundleError(f"{where} linux.resources.{next(iter(resources))}: a Slurm task's limits are its job's "
                          "(its cgroup), not the container's", hint=UNDONE_HINT)
    capabilities = process.get("capabilities")
    seccomp = linux.get("seccomp")
    return Confinement(
        masked=_paths(linux.get("maskedPaths", []), f"{where} linux.maskedPaths"),
        readonly=_paths(linux.get("readonlyPaths", []), f"{where} linux.readonlyPaths"),
        capabilities=None if capabilities is None else _capabilities(capabilities, f"{where} process.capabilities"),
        seccomp_filter=b"" if seccomp is None else compile_filter(seccomp, where))


def _paths(value: Any, field: str) -> tuple[str, ...]:
    paths = strings_field(value, field)
    for index, path in enumerate(paths):
        if not path.startswith("/"):
            raise BundleError(f"{field}[{index}] {path!r} is not an absolute path")
    return tuple(paths)


def _capabilities(value: Any, field: str) -> CapabilitySets:
    sets = mapping_field(value, field)
    for key in sets:
        if key not in SETS:
            raise BundleError(f"{field}.{key} is no capability set (those are {', '.join(SETS)})")
    masks = {name: _mask(sets.get(name, []), f"{field}.{name}") for name in SETS}
    rules = (("effective", "permitted", "the kernel keeps no capability effective that is not permitted"),
             ("inheritable", "bounding", "a capability outside the bounding set cannot be inherited"),
             ("ambient", "permitted", "an ambient capability must be permitted"),
             ("ambient", "inheritable", "an ambient capability must be inheritable"))
    for subset, superset, why in rules:
        extra = masks[subset] & ~masks[superset]
        if extra:
            name = f"CAP_{CAPABILITIES[(extra & -extra).bit_length() - 1]}"
            raise BundleError(f"{field}.{subset} has {name}, which the {superset} set lacks: {why}")
    return CapabilitySets(**masks)


def _mask(value: Any, field: str) -> int:
    mask = 0
    for index, name in enumerate(strings_field(value, field)):
        number = NUMBER_OF_CAPABILITY.get(string_field(name, f"{field}[{index}]"))
        if number is None:
            raise BundleError(f"{field}[{index}] {name!r} is no Linux capability (CAP_CHOWN, CAP_SYS_ADMIN, ...)")
        mask |= 1 << number
    return mask
