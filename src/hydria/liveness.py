"""Whether the process that wrote a lock or an announcement is still alive, so that one left by a
process killed on this node is taken over at once instead of after a stale period.

A holder writes :func:`holder_line` (``NODE.PID PIDNS START``): its node, its PID, its PID
namespace and its start time (clock ticks after boot, from ``/proc/PID/stat``). Another process
judges it gone only when it can be sure: the same node *and* the same PID namespace (test beds
and containers give several PID namespaces one host name), and no process with that PID, one that
started at another time (the PID was reused), or one that has ended and waits to be collected (a
zombie: a parent that has not waited yet, or a PID 1 that never reaps, as in Slurm's namespaces).
Anything else (another node, a line of an older hydria, a process it may not look at) is alive
for it: the stale period decides, as before.
"""

from __future__ import annotations

import os

from hydria.digits import is_number
from hydria.paths import process_tag

_ENDED = ("Z", "X")  # the states of /proc/PID/stat of a process that has ended (zombie, dead)


def holder_line() -> str:
    """What a lock or an announcement written by this process holds (one line, no newline)."""
    return f"{process_tag()} {_pid_namespace()} {_start_time(os.getpid())}"


def holder_name(line: str) -> str:
    """"node N, process P" for a line of :func:`holder_line` (or the ``NODE.PID`` of older
    versions), else "another importer"."""
    fields = line.split()
    node, _, pid = fields[0].rpartition(".") if fields else ("", "", "")
    return f"node {node}, process {pid}" if node and is_number(pid) else "another importer"


def is_gone(line: str) -> bool:
    """Whether the holder that wrote ``line`` is known to be dead: it ran on this node, in this PID
    namespace, and its PID is free, a zombie's, or taken by a process that started later."""
    fields = line.split()
    if len(fields) != 3:
        return False
    node, _, pid_text = fields[0].rpartition(".")
    if node != os.uname().nodename or fields[1] != _pid_namespace() or not is_number(pid_text):
        return False
    pid = int(pid_text)
    if pid <= 0:
        return False
    if not pid_exists(pid):
        return True
    state, started = _state_and_start(pid)
    if state in _ENDED:
        return True
    return "?" not in (started, fields[2]) and started != fields[2]


def has_ended(pid: int) -> bool:
    """Whether ``pid`` is a process that has ended and waits to be collected (a zombie)."""
    return _state_and_start(pid)[0] in _ENDED


def pid_exists(pid: int) -> bool:
    """Whether a process of any user has ``pid`` in this PID namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return True


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").replace(" ", "")
    except OSError:
        return "?"


def _start_time(pid: int) -> str:
    return _state_and_start(pid)[1]


def _state_and_start(pid: int) -> tuple[str, str]:
    """Fields 3 (the state: ``Z`` for a zombie) and 22 (the start time) of ``/proc/PID/stat``,
    read after the command's name, which may hold spaces; "?" for what cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return "?", "?"
    fields = text.rpartition(")")[2].split()
    return (fields[0] if fields else "?"), (fields[19] if len(fields) > 19 else "?")
