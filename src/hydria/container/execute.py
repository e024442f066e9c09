"""``exec``: run a command inside a running container, given the PID of one of its processes.

The command joins the target's user, mount, PID, network, IPC, UTS and cgroup namespaces
(those it does not already share), starts in the target's working directory, and gets the
target's environment plus ``--env``. It is executed directly: no rc script, no shell. With a
joined PID namespace, hydria forks so that the command becomes a member of it, and passes its
exit status on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from hydria.errors import HydriaError
from hydria.runtime import seccomp
from hydria.runtime import syscalls as sc

# The user namespace first: it grants the capabilities that joining the others needs.
NAMESPACES = (("user", sc.CLONE_NEWUSER), ("mnt", sc.CLONE_NEWNS), ("pid", sc.CLONE_NEWPID),
              ("net", sc.CLONE_NEWNET), ("ipc", sc.CLONE_NEWIPC), ("uts", sc.CLONE_NEWUTS),
              ("cgroup", sc.CLONE_NEWCGROUP))


def target_environment(pid: int) -> dict[str, str]:
    """The environment of process ``pid``. Raises HydriaError when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError as e:
        raise HydriaError(f"cannot read the environment of process {pid}: {e.strerror}") from None
    environment = {}
    for entry in entries:
        name, equals, value = entry.partition(b"=")
        if equals:
            environment[os.fsdecode(name)] = os.fsdecode(value)
    return environment


def execute(pid: int, command: Sequence[str], extra_env: Mapping[str, str]) -> None:
    """Join ``pid``'s namespaces and exec ``command``; returns only by raising HydriaError."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise HydriaError(f"Process not found: {pid}",
                          hint="hydria list --fancy shows the PIDs of your running containers") from None
    except PermissionError:
        raise HydriaError(f"Process not found: {pid}", hint="the process belongs to another user") from None
    environment = {**target_environment(pid), **extra_env}
    handles = []
    try:
        for name, kind in NAMESPACES:
            theirs, ours = f"/proc/{pid}/ns/{name}", f"/proc/self/ns/{name}"
            if os.path.exists(theirs) and os.stat(theirs).st_ino != os.stat(ours).st_ino:
                handles.append((name, kind, os.open(theirs, os.O_RDONLY | os.O_CLOEXEC)))
        cwd = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise HydriaError(f"cannot open the namespaces of process {pid}: {e.strerror}") from None
    if not any(name == "mnt" for name, _, _ in handles):  # every container has a mount namespace of its own
        for _, _, handle in handles:
            os.close(handle)
        os.close(cwd)
        raise HydriaError(f"process {pid} is not in a container: it shares this process's mount namespace",
                          hint="hydria list --fancy shows the PIDs of your running containers")
    for name, kind, handle in handles:
        try:
            sc.setns(handle, kind)
        except OSError as e:
            raise HydriaError(f"failed to join {name} namespace of process {pid}: {e.strerror}") from None
        os.close(handle)
    os.fchdir(cwd)
    os.close(cwd)
    if any(name == "pid" for name, _, _ in handles):
        child = os.fork()  # setns(pid) applies to children only
        if child != 0:
            sc.exit_like(child)
    sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
    seccomp.install()
    try:
        os.execvpe(command[0], list(command), environment)
    except OSError as e:
        raise HydriaError(f"{command[0]}: {e.strerror}") from None

