"""The calling process's own user and mount namespaces (and the ones settings ask for)."""

from __future__ import annotations

import errno
import os
import time

from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING
from hydria.runtime import syscalls as sc

if TYPE_CHECKING:
    from collections.abc import Callable

THREAD_EXIT_WAIT = 5.0  # seconds for the threads of an in-process import to leave
LEAVING_WAIT = 0.2  # seconds for a thread that /proc no longer counts to leave the kernel


def privileged(settings: Settings, uid: int) -> bool:
    """Real root with ``HYDRIA_ALLOW_SUPERUSER``: no user namespace, root keeps its privileges
    (and no seccomp filter), as enroot's privileged mode."""
    return uid == 0 and settings.allow_superuser


def enter(settings: Settings, uid: int, gid: int) -> None:
    """Unshare: one uid and gid mapped (the caller's, or 0 with remap_root), mounts made slave;
    in privileged mode, no user namespace (the slave mounts keep root's mounts from the host)."""
    flags = sc.CLONE_NEWNS
    flags |= sc.CLONE_NEWNET if settings.unshare_net else 0
    flags |= sc.CLONE_NEWIPC if settings.unshare_ipc else 0
    flags |= sc.CLONE_NEWUTS if settings.unshare_uts else 0
    if privileged(settings, uid):
        sc.unshare(flags)
        sc.mount(None, "/", None, sc.MS_REC | sc.MS_SLAVE)
    else:
        _enter_user_namespace(flags, settings, uid, gid)
    if settings.unshare_net:
        _loopback_up()


def _enter_user_namespace(flags: int, settings: Settings, uid: int, gid: int) -> None:
    try:
        _unshare_user(flags | sc.CLONE_NEWUSER)
        with open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        inner = 0 if settings.remap_root else uid
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{inner} {uid} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{0 if settings.remap_root else gid} {gid} 1")
        sc.mount(None, "/", None, sc.MS_REC | sc.MS_SLAVE)
    except OSError as e:
        from hydria.apparmor import namespace_error

        raise namespace_error(f"cannot create the container's namespaces: {e.strerror}") from None


def _unshare_user(flags: int) -> None:
    """unshare(CLONE_NEWUSER) fails with EINVAL while the process has other threads. A thread that
    Python has joined (a Slurm step's import, just before its start) can still be leaving the
    kernel for a moment, even after /proc stops counting it (the kernel checks that no other task
    shares the address space): try again until it has left, for a bounded time."""
    threads_deadline = time.monotonic() + THREAD_EXIT_WAIT
    single_deadline = None  # once /proc counts one thread: LEAVING_WAIT more
    while True:
        try:
            sc.unshare(flags)
            return
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            now = time.monotonic()
            if _thread_count() > 1:
                if now > threads_deadline:
                    raise HydriaError(f"cannot create the container's namespaces: {_thread_count() - 1} other "
                                      f"thread(s) of this process are still running") from None
            else:
                single_deadline = single_deadline or now + LEAVING_WAIT
                if now > single_deadline:
                    raise
        time.sleep(0.001)


def _thread_count() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def _loopback_up() -> None:
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, siocgifflags, request))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def in_child(work: Callable[[], None]) -> None:
    """Run ``work`` in a forked child, whose namespaces vanish with it; its HydriaError is raised here.
    The child and the tools it runs are a process group of their own, which an interrupt of this
    process (Ctrl-C, or SIGTERM as one: hydria/interrupt.py) kills too, and this process returns
    only once every one of them has ended: it is their subreaper meanwhile, so that a tool killed
    with the child (mksquashfs) is reaped here, not left dying after hydria has exited."""
    sc.prctl(sc.PR_SET_CHILD_SUBREAPER, 1)
    try:
        _run_in_child(work)
    finally:
        sc.prctl(sc.PR_SET_CHILD_SUBREAPER, 0)


def _run_in_child(work: Callable[[], None]) -> None:
    import signal  # here: a start never forks this way

    reader, writer = os.pipe()
    # Interrupts wait until the child is in its group and this process can end it (an interrupt
    # right after the fork left the child writing on).
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        os.close(reader)
        status = 1
        try:
            work()
            status = 0
        except HydriaError as e:
            os.write(writer, e.message.encode())
        except BaseException:  # noqa: BLE001 the parent reports it
            import traceback

            os.write(writer, traceback.format_exc().encode())
        finally:
            os._exit(status)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first
    except OSError:
        pass  # it has ended already
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            message = pipe.read().decode(errors="replace").strip()
        _, status = os.waitpid(pid, 0)
    except BaseException:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:  # the child, then the tools it ran, which were handed to this process as it died
            try:
                os.waitpid(-pid, 0)
            except ChildProcessError:
                break
        raise
    if status != 0:
        raise HydriaError(message or "the child process failed")
