"""The processes of a Slurm step's OCI containers on this node, for the state, kill and delete
commands that slurmstepd runs (as root) when the step ends (``oci.conf``'s ``RunTimeQuery``,
``RunTimeKill``, ``RunTimeDelete``).

``hydria oci run`` keeps no record and no daemon: each task's container is the task's own process
(``hydria oci run`` becomes the container's program), so slurmstepd usually asks after they have
all ended. What a container may leave running (a program that went into the background) is found
by what only its processes have together: the step's user, the step's ``SLURM_JOB_ID`` and
``SLURM_STEP_ID`` in the environment they started with, and a mount namespace other than the
caller's, slurmstepd's (they run in a container).
"""

from __future__ import annotations

import os
import signal

from hydria.digits import is_number
from hydria.liveness import has_ended
from hydria.record import Record


class Step(Record):
    uid: int
    job: str
    step: str


def processes(step: Step) -> list[int]:
    """The PIDs of ``step``'s container processes that run now (not zombies), in order."""
    host = _mount_namespace("self")
    found = []
    for entry in os.scandir("/proc"):
        if not is_number(entry.name):
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != step.uid or has_ended(pid):
                continue
            namespace = _mount_namespace(pid)
            if namespace is None or namespace == host or not _in_step(pid, step):
                continue
        except OSError:
            continue  # ended meanwhile, or not ours to look at
        found.append(pid)
    return sorted(found)


def signal_all(step: Step, signum: signal.Signals) -> int:
    """Send ``signum`` to every process of ``step``'s containers; how many got it."""
    sent = 0
    for pid in processes(step):
        try:
            os.kill(pid, signum)
            sent += 1
        except ProcessLookupError:
            continue
    return sent


def _in_step(pid: int, step: Step) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        variables = set(handle.read().split(b"\0"))
    return {f"SLURM_JOB_ID={step.job}".encode(), f"SLURM_STEP_ID={step.step}".encode()} <= variables


def _mount_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None

