"""The built-in cgroups hook's binds (hooks/cgroups.py), from sample /proc files."""

from __future__ import annotations

from hydria.hooks import cgroups
from hydria.runtime.fstab import MountEntry

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
"""
SELF = """\
9:name=systemd:/user.slice
4:memory:/slurm/uid_1001/job_7/step_0
2:cpu,cpuacct:/slurm/uid_1001/job_7/step_0
0::/
"""


def sources(entries: list[MountEntry]) -> dict[str, str]:
    return {entry.target: entry.source for entry in entries}


def test_own_subtree_over_each_hierarchy() -> None:
    entries = cgroups.mounts(SELF, MOUNTINFO, {})
    assert sources(entries) == {
        "/sys/fs/cgroup/systemd": "/sys/fs/cgroup/systemd/user.slice",
        "/sys/fs/cgroup/memory": "/sys/fs/cgroup/memory/slurm/uid_1001/job_7/step_0",
        "/sys/fs/cgroup/cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1001/job_7/step_0",
    }  # the v2 hierarchy: the caller is at its root, nothing to bind
    assert all("ro" in e.options and "rbind" in e.options for e in entries)


def test_a_slurm_step_sees_its_job() -> None:
    found = sources(cgroups.mounts(SELF, MOUNTINFO, {"SLURM_STEP_ID": "0"}))
    assert found["/sys/fs/cgroup/memory"] == "/sys/fs/cgroup/memory/slurm/uid_1001/job_7"


def test_unified_only_and_a_mount_rooted_elsewhere() -> None:
    mountinfo = "25 1 0:22 /outer /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert sources(cgroups.mounts("0::/outer/inner\n", mountinfo, {})) == {"/sys/fs/cgroup": "/sys/fs/cgroup/inner"}
    assert cgroups.mounts("0::/elsewhere\n", mountinfo, {}) == []  # not visible through this mount
    assert cgroups.mounts("0::/\n", "", {}) == []  # no cgroup file system mounted
