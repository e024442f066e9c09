"""A bundle's ``linux.seccomp`` compiled to the kernel's filter by libseccomp, the library that
runc and crun use for it, so that a profile means here what it means there: unknown calls are
left out, rules with the default action are left out, calls are matched on every listed
architecture.

The filter is compiled when the bundle is read (a wrong field fails the step before anything is
made) and loaded by the container just before its program runs (runtime/confinement.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Mapping
from typing import Any

from hydria.oci.fields import (
    UNDONE_HINT,
    BundleError,
    list_field,
    mapping_field,
    number_field,
    only_known,
    string_field,
    strings_field,
)

LIBRARY = "libseccomp.so.2"
PROFILE = frozenset({"defaultAction", "defaultErrnoRet", "architectures", "syscalls"})
RULE = frozenset({"names", "action", "errnoRet", "args", "comment", "includes", "excludes"})
ARGUMENT = frozenset({"index", "value", "valueTwo", "op"})
# libseccomp's action values (seccomp.h); ERRNO and TRACE carry a number in the low 16 bits.
ACTIONS = {"SCMP_ACT_KILL": 0x00000000, "SCMP_ACT_KILL_THREAD": 0x00000000, "SCMP_ACT_KILL_PROCESS": 0x80000000,
           "SCMP_ACT_TRAP": 0x00030000, "SCMP_ACT_ERRNO": 0x00050000, "SCMP_ACT_TRACE": 0x7FF00000,
           "SCMP_ACT_LOG": 0x7FFC0000, "SCMP_ACT_ALLOW": 0x7FFF0000}
OPERATORS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4, "SCMP_CMP_GE": 5,
             "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
NO_SYSCALL = -1  # __NR_SCMP_ERROR: a name this libseccomp does not know


class _Comparison(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def compile_filter(profile: Any, where: str) -> bytes:
    """The BPF program (``struct sock_filter`` array) of the profile ``linux.seccomp``.

    Raises:
        BundleError: a field is wrong, or this node has no libseccomp.
    """
    field = f"{where} linux.seccomp"
    profile = mapping_field(profile, field)
    only_known(profile, PROFILE, f"{field}.")
    default = _action(profile.get("defaultAction"), profile.get("defaultErrnoRet"), f"{field}.defaultAction")
    library = _library(field)
    context = library.seccomp_init(ctypes.c_uint32(default))
    if not context:
        raise BundleError(f"{field}.defaultAction: libseccomp refused it")
    try:
        for index, name in enumerate(strings_field(profile.get("architectures", []), f"{field}.architectures")):
            _add_architecture(library, context, name, f"{field}.architectures[{index}]")
        for index, rule in enumerate(list_field(profile.get("syscalls", []), f"{field}.syscalls")):
            _add_rule(library, context, mapping_field(rule, f"{field}.syscalls[{index}]"), default,
                      f"{field}.syscalls[{index}]")
        return _export(library, context, field)
    finally:
        library.seccomp_release(context)


def _library(field: str) -> ctypes.CDLL:
    try:
        library = ctypes.CDLL(LIBRARY, use_errno=True)
    except OSError:
        raise BundleError(f"{field}: this node has no {LIBRARY} to compile the bundle's seccomp profile",
                          hint="the administrator installs libseccomp (Debian, Ubuntu: libseccomp2), or the "
                               "bundle comes without linux.seccomp (podman run --security-opt "
                               "seccomp=unconfined)") from None
    library.seccomp_init.restype = ctypes.c_void_p
    library.seccomp_init.argtypes = [ctypes.c_uint32]
    library.seccomp_release.argtypes = [ctypes.c_void_p]
    library.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    library.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    library.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(_Comparison)]
    library.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return library


def _action(name: Any, number: Any, field: str) -> int:
    action = string_field(name, field)
    if action not in ACTIONS:
        raise BundleError(f"{field} {action!r} is not an action hydria runs (one of {', '.join(sorted(ACTIONS))})",
                          hint=UNDONE_HINT if action == "SCMP_ACT_NOTIFY" else None)
    value = ACTIONS[action]
    if action in ("SCMP_ACT_ERRNO", "SCMP_ACT_TRACE"):
        code = errno.EPERM if number is None else number_field(number, f"{field}'s errnoRet")
        value |= code & 0xFFFF
    return value


def _add_architecture(library: ctypes.CDLL, context: int, name: str, field: str) -> None:
    token = library.seccomp_arch_resolve_name(name.removeprefix("SCMP_ARCH_").lower().encode())
    if not token:
        raise BundleError(f"{field} {name!r} is no architecture libseccomp knows")
    result = library.seccomp_arch_add(context, token)
    if result not in (0, -errno.EEXIST):
        raise BundleError(f"{field} {name!r}: libseccomp cannot add it ({os.strerror(-result)})")


def _add_rule(library: ctypes.CDLL, context: int, rule: Mapping[str, Any], default: int, field: str) -> None:
    only_known(rule, RULE, f"{field}.")
    if "includes" in rule or "excludes" in rule:
        raise BundleError(f"{field}: includes and excludes are profile-generator fields (Docker's and "
                          "podman's JSON profiles); a bundle's config.json has them resolved already")
    action = _action(rule.get("action"), rule.get("errnoRet"), f"{field}.action")
    comparisons = _comparisons(rule.get("args", []), f"{field}.args")
    if action == default:
        return  # libseccomp refuses it, and it changes nothing
    for index, name in enumerate(strings_field(rule.get("names", []), f"{field}.names")):
        number = library.seccomp_syscall_resolve_name(name.encode())
        if number == NO_SYSCALL:
            continue  # a call this machine does not have, as runc leaves it
        result = library.seccomp_rule_add_array(context, ctypes.c_uint32(action), number, len(comparisons),
                                                comparisons)
        if result < 0:
            raise BundleError(f"{field}.names[{index}] {name!r}: libseccomp refused the rule "
                              f"({os.strerror(-result)})")


def _comparisons(arguments: Any, field: str) -> ctypes.Array[_Comparison]:
    entries = list_field(arguments, field)
    array = (_Comparison * len(entries))()
    for index, entry in enumerate(entries):
        where = f"{field}[{index}]"
        entry = mapping_field(entry, where)
        only_known(entry, ARGUMENT, f"{where}.")
        operator = string_field(entry.get("op"), f"{where}.op")
        if operator not in OPERATORS:
            raise BundleError(f"{where}.op {operator!r} is not one of {', '.join(sorted(OPERATORS))}")
        array[index] = _Comparison(number_field(entry.get("index"), f"{where}.index"), OPERATORS[operator],
                                   number_field(entry.get("value", 0), f"{where}.value"),
                                   number_field(entry.get("valueTwo", 0), f"{where}.valueTwo"))
    return array


def _export(library: ctypes.CDLL, context: int, field: str) -> bytes:
    descriptor = os.memfd_create("seccomp-filter")
    try:
        result = library.seccomp_export_bpf(context, descriptor)
        if result < 0:
            raise BundleError(f"{field}: libseccomp could not build the filter ({os.strerror(-result)})")
        os.lseek(descriptor, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(descriptor, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)
