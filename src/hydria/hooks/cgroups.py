"""The built-in cgroups hook (enroot's ``10-cgroups.sh``): the container sees its own cgroups, not
the host's tree. For each hierarchy the caller belongs to (``/proc/self/cgroup``: cgroup v1
controllers and the v2 unified hierarchy), the caller's own subtree is bound read-only over that
hierarchy's mount point in the container; in a Slurm step, the parent directory, so that the job's
cgroup (its limits) is visible rather than only the step's. The start then enters a cgroup
namespace of its own, so that ``/proc/self/cgroup`` reads ``/`` inside.
"""

from __future__ import annotations

import os

from hydria.record import TYPE_CHECKING
from hydria.runtime.edits import Edits, StartContext
from hydria.runtime.fstab import MountEntry, unescape

if TYPE_CHECKING:
    from collections.abc import Mapping

OPTIONS = ("rbind", "ro", "nosuid", "nodev", "noexec", "nofail", "silent")


def edits(context: StartContext) -> Edits:
    """The binds for the caller's own cgroups."""
    try:
        with open("/proc/self/cgroup") as groups, open("/proc/self/mountinfo") as mountinfo:
            return Edits(mounts=tuple(mounts(groups.read(), mountinfo.read(), context.host)))
    except OSError:
        return Edits()


def mounts(self_cgroup: str, mountinfo: str, environment: Mapping[str, str]) -> list[MountEntry]:
    """The binds for a process whose ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` read as
    given; ``environment`` tells whether it is a Slurm step."""
    hierarchies = _hierarchies(mountinfo)
    in_step = bool(environment.get("SLURM_STEP_ID"))
    entries = []
    for line in self_cgroup.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        wanted = set(controllers.split(",")) if controllers else None  # None: the v2 hierarchy
        found = next(((point, root) for options, point, root in hierarchies
                      if (options is None) == (wanted is None) and (wanted is None or wanted <= (options or set()))),
                     None)
        if found is None or not path.startswith("/"):
            continue
        mount_point, mount_root = found
        if in_step and path != "/":
            path = os.path.dirname(path.rstrip("/"))
        relative = os.path.relpath(path, mount_root) if path.startswith(mount_root) else None
        if relative is None or relative.startswith("..") or relative == ".":
            continue  # outside what this mount shows (a nested cgroup namespace), or all of it
        source = os.path.normpath(os.path.join(mount_point, relative))
        entries.append(MountEntry(source, mount_point, "none", OPTIONS, origin="cgroups"))
    return entries


def _hierarchies(mountinfo: str) -> list[tuple[set[str] | None, str, str]]:
    """(super options, or None for cgroup2; mount point; mount root) of each cgroup mount."""
    found: list[tuple[set[str] | None, str, str]] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < fields.index("-") + 4:
            continue
        separator = fields.index("-")
        fstype, options = fields[separator + 1], set(fields[separator + 3].split(","))
        if fstype in ("cgroup", "cgroup2"):
            found.append((options if fstype == "cgroup" else None, unescape(fields[4]), unescape(fields[3])))
    return found

