"""ctypes wrappers for the system calls the runtime needs, raising OSError with the real errno."""

from __future__ import annotations

import ctypes
import os

from hydria.log import Logger

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_SYNCHRONOUS = 0x10
MS_REMOUNT = 0x20
MS_MANDLOCK = 0x40
MS_DIRSYNC = 0x80
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_SILENT = 0x8000
MS_UNBINDABLE = 0x20000
MS_PRIVATE = 0x40000
MS_SLAVE = 0x80000
MS_SHARED = 0x100000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
MS_LAZYTIME = 0x2000000

MNT_DETACH = 0x2
AT_FDCWD = -100
RENAME_NOREPLACE = 0x1
RENAME_EXCHANGE = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIG_DFL = 0
_CAPABILITY_VERSION_3 = 0x20080522


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), what)


def renameat2(old: str, new: str, flags: int) -> None:
    """rename(2) with ``flags`` (RENAME_NOREPLACE, RENAME_EXCHANGE). Raises OSError: EINVAL
    where the file system cannot, ENOSYS where the C library lacks it (before glibc 2.28)."""
    function = getattr(_libc, "renameat2", None)
    if function is None:
        raise OSError(38, os.strerror(38), "renameat2")  # ENOSYS
    _check(function(AT_FDCWD, _c(old), AT_FDCWD, _c(new), ctypes.c_uint(flags)), f"rename {old} to {new}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int = 0) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(_c(source), _c(target), _c(fstype), ctypes.c_ulong(flags), _c(data)),
           f"mount {source or 'none'} on {target}")


def umount2(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_c(target), ctypes.c_int(flags)), f"umount {target}")


# glibc has no pivot_root wrapper; its syscall number differs by architecture.
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT[os.uname().machine]
    _check(_libc.syscall(ctypes.c_long(number), _c(new_root), _c(put_old)), "pivot_root")


def prctl(option: int, arg: int = 0, arg3: int = 0) -> None:
    """``arg3`` may be an address (ctypes.addressof)."""
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), "prctl")


def in_bounding_set(number: int) -> bool:
    """Whether capability ``number`` is in this process's bounding set; OSError (EINVAL) when the
    kernel has no such capability."""
    result = _libc.prctl(ctypes.c_int(PR_CAPBSET_READ), ctypes.c_ulong(number), ctypes.c_ulong(0),
                         ctypes.c_ulong(0), ctypes.c_ulong(0))
    if result < 0:
        _check(result, "prctl")
    return bool(result)


def last_capability() -> int:
    """The kernel's highest capability number, asked of the kernel itself: the file that tells
    (/proc/sys/kernel/cap_last_cap) may be masked by now."""
    number = 0
    while number < 63:
        try:
            in_bounding_set(number + 1)
        except OSError:  # EINVAL: no such capability
            break
        number += 1
    return number


def empty_bounding_set() -> None:
    """Drop every capability from this process's bounding set (CAP_SETPCAP needed), so that no
    program it runs can get one back."""
    for number in range(last_capability() + 1):
        prctl(PR_CAPBSET_DROP, number)


def set_process_title(title: str) -> None:
    """What ``ps``, ``pgrep`` and ``pkill`` show and match for this process: its name (the first
    15 bytes) and its command line, written over the one it was started with (a forked helper
    must not carry the user's command: ``pkill -f`` on a job's command would find it). The
    command line keeps its length: a longer title is cut."""
    encoded = title.encode(errors="surrogateescape")
    name = ctypes.create_string_buffer(encoded[:15])  # kept until prctl has copied it
    prctl(PR_SET_NAME, ctypes.addressof(name))
    with open("/proc/self/stat", "rb") as handle:
        fields = handle.read().rpartition(b")")[2].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49 of proc(5))
    if end > start:
        text = encoded[:end - start - 1]
        ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def raise_ambient_capabilities() -> None:
    """Make every capability this process holds inheritable and ambient, so that the programs it
    starts keep them across ``execve`` (as enroot's hooks run: with the capabilities of the
    container's user namespace, to mount)."""
    data = _set_inheritable(all_permitted=True)
    for number in range(64):
        if data[number // 32].permitted >> (number % 32) & 1:
            prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, number)


def clear_ambient_capabilities() -> None:
    """Undo :func:`raise_ambient_capabilities`: the programs started next get none."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _set_inheritable(all_permitted=False)


class AmbientCapabilities:
    """The programs started inside the ``with`` block keep this process's capabilities (those of
    the container's user namespace) across ``execve``, as OCI runtimes run their hooks; where the
    kernel cannot (before 4.3), they run without, with a warning naming ``purpose``. A class, not
    ``contextlib.contextmanager``, whose import would cost every start."""

    def __init__(self, purpose: str) -> None:
        self.purpose = purpose

    def __enter__(self) -> None:
        try:
            raise_ambient_capabilities()
        except OSError as e:
            Logger(__name__).warning("%s run without capabilities (%s): their mounts will fail", self.purpose,
                                     e.strerror)

    def __exit__(self, *exception: object) -> None:
        clear_ambient_capabilities()


def _set_inheritable(all_permitted: bool) -> ctypes.Array[_CapData]:
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    for half in data:
        half.inheritable = half.permitted if all_permitted else 0
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    return data


def set_capabilities(effective: int, permitted: int, inheritable: int) -> None:
    """Set this process's capability sets, each a bit mask of capability numbers."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for half in range(2):
        data[half].effective, data[half].permitted, data[half].inheritable = (
            mask >> (32 * half) & 0xFFFFFFFF for mask in (effective, permitted, inheritable))
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def close_descriptors_except(kept: tuple[int, ...]) -> None:
    """Close every descriptor past standard error but ``kept``, as subprocess's close_fds does
    for the programs it starts: a forked child that outlives its caller holds none of its pipes."""
    low = 3
    for fd in sorted(kept):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def exit_like(child: int) -> None:
    """Wait for ``child`` and end this process the way it ended: the same exit status, or the
    same signal (falling back to 128 + signal when that signal does not kill this process)."""
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        # The default action through libc: the signal module (and its enum import) would cost
        # every start, and after pivot_root or setns the host's library is out of reach.
        _libc.signal(ctypes.c_int(os.WTERMSIG(status)), ctypes.c_void_p(SIG_DFL))
        os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _c(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)
