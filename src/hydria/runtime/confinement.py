"""What an OCI bundle's process asks to be kept from (``hydria oci run``): paths masked or made
read-only, a narrower set of capabilities, and the bundle's own seccomp filter. Podman and
Docker write all four into every config.json (Slurm's ``scrun`` hands it on), so a runtime that
refused them could run none of their containers, and one that ignored them would give a
container more than its configuration says.

Applied in the container, after its own /proc is mounted and just before the program runs, in
the order runc and crun apply them: masks, capabilities, then the filter (which may deny the
calls the others need).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from hydria.errors import HydriaError
from hydria.record import Record
from hydria.runtime import seccomp
from hydria.runtime import syscalls as sc

LOCKED_FLAGS = sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC | sc.MS_NOATIME | sc.MS_NODIRATIME | sc.MS_RELATIME


class CapabilitySets(Record):
    """Each set as a bit mask of capability numbers (``1 << CAP_...``)."""

    bounding: int
    effective: int
    permitted: int
    inheritable: int
    ambient: int


class Confinement(Record):
    masked: tuple[str, ...] = ()  # linux.maskedPaths: unreadable (a file: /dev/null over it; a folder: empty)
    readonly: tuple[str, ...] = ()  # linux.readonlyPaths
    capabilities: CapabilitySets | None = None  # process.capabilities; None: the user namespace's
    seccomp_filter: bytes = b""  # linux.seccomp compiled to BPF (oci/seccomp_profile.py); empty: none


def apply_masks(confinement: Confinement) -> None:
    """Mask and make read-only the paths the configuration names (absolute, in the container's
    root, which is ``/`` by now); a path the container lacks is left, as runc leaves it."""
    for path in confinement.masked:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        with _failing_as(f"linux.maskedPaths: cannot mask {path}"):
            if stat.S_ISDIR(mode):
                sc.mount("tmpfs", path, "tmpfs", sc.MS_RDONLY, "size=0")
            else:
                sc.mount("/dev/null", path, None, sc.MS_BIND)
    for path in confinement.readonly:
        if not os.path.lexists(path):
            continue
        with _failing_as(f"linux.readonlyPaths: cannot make {path} read-only"):
            sc.mount(path, path, None, sc.MS_BIND | sc.MS_REC)
            locked = os.statvfs(path).f_flag & LOCKED_FLAGS  # a user namespace may not clear them
            sc.mount(None, path, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | locked)


def restrict(confinement: Confinement) -> None:
    """Narrow the capabilities to the configuration's, then load its seccomp filter (no_new_privs
    must be set). The program keeps after ``execve`` what the kernel's rules give: a root program
    its bounding and inheritable sets, another program its ambient set."""
    capabilities = confinement.capabilities
    if capabilities is not None:
        with _failing_as("process.capabilities: cannot set them"):
            _set_capabilities(capabilities)
    if confinement.seccomp_filter:
        with _failing_as("linux.seccomp: the kernel refused the filter"):
            seccomp.load(confinement.seccomp_filter)


def _set_capabilities(capabilities: CapabilitySets) -> None:
    last = sc.last_capability()
    known = (1 << (last + 1)) - 1  # a capability newer than the kernel is none it could give
    for number in range(last + 1):
        if not capabilities.bounding >> number & 1:
            sc.prctl(sc.PR_CAPBSET_DROP, number)
    sc.set_capabilities(capabilities.effective & known, capabilities.permitted & known,
                        capabilities.inheritable & known)
    sc.prctl(sc.PR_CAP_AMBIENT, sc.PR_CAP_AMBIENT_CLEAR_ALL)
    for number in range(last + 1):
        if capabilities.ambient >> number & 1:
            sc.prctl(sc.PR_CAP_AMBIENT, sc.PR_CAP_AMBIENT_RAISE, number)


@contextlib.contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """An OSError inside becomes an error that names the bundle's field."""
    try:
        yield
    except OSError as e:
        raise HydriaError(f"{what} in the container: {e.strerror}",
                          hint="the bundle's config.json asks for it (docs/slurm.md lists what hydria does)") from None
