"""Which file system holds a path, and whether other nodes may share it.

Read from ``/proc/self/mountinfo`` (the type the kernel names, e.g. ``nfs4`` or ``fuse.sshfs``),
which a ``statfs`` magic number would give only for the types it knows.
"""

from __future__ import annotations

from hydria.runtime.fstab import unescape

# Network and cluster file systems: what is written on one node is seen by the others.
SHARED_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "ocfs2", "gfs2",
    "orangefs", "pvfs2", "panfs", "wekafs", "afs",
})


def file_system_type(path: str) -> str:
    """The type of the file system that holds ``path`` (an absolute path without links; the
    longest mount point above it), or "unknown file system"."""
    best, kind = "", "unknown file system"
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split()
                mount_point = unescape(fields[4])
                inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, kind = mount_point, line.split(" - ", 1)[1].split()[0]
    except (OSError, IndexError):
        pass
    return kind


def may_be_shared(kind: str) -> bool:
    """Whether a file system of this type is, as a rule, one that several nodes mount: a network
    or cluster file system, or a FUSE one (sshfs, s3fs, gcsfuse, JuiceFS... mostly network)."""
    return kind in SHARED_TYPES or kind == "fuse" or kind.startswith("fuse.")
