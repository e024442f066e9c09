"""Containers where the kernel's overlay cannot serve, with fuse-overlayfs as enroot does:
``HYDRIA_NATIVE_OVERLAYFS`` off (``ENROOT_NATIVE_OVERLAYFS``; kernels before 5.11 such as RHEL 8's
4.18 refuse overlayfs in user namespaces), and a data path on a network file system.

The test machines' kernel has no NFS client, so a FUSE file system (bindfs of a local folder,
mounted here by root with allow_other) stands in for it: the kernel refuses an overlay upper
directory there, as it does on NFS.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.users import live_processes
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration
ROOT_IS_FUSE_OVERLAY = "grep -c ' / / .* - fuse.fuse-overlayfs ' /proc/self/mountinfo"


@pytest.mark.parametrize("setting", [{"HYDRIA_NATIVE_OVERLAYFS": "n"}, {"ENROOT_NATIVE_OVERLAYFS": "no"}])
def test_native_overlayfs_off_starts_on_fuse_overlayfs(setting: dict[str, str], images: dict[str, Path],
                                                       workspace: Workspace) -> None:
    script = f"rm /etc/issue && echo new > /new && cat /new && test ! -e /etc/issue && {ROOT_IS_FUSE_OVERLAY}"
    result = workspace.run("start", "--rw", str(images["debian"]), "sh", "-c", script, **setting)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["new", "1"]
    assert live_processes(workspace.user) == []  # fuse-overlayfs and squashfuse went with the container
    native = workspace.run("start", str(images["debian"]), "sh", "-c", f"{ROOT_IS_FUSE_OVERLAY} || true")
    assert native.stdout == "0\n"  # the kernel's overlay where it can


@pytest.fixture
def network_data(workspace: Workspace) -> Iterator[Path]:
    """A FUSE file system (bindfs) for the data path, in place of NFS."""
    backing, mount_point = workspace.root / "backing", workspace.root / "network"
    for folder in (backing, mount_point):
        folder.mkdir()
        os.chown(folder, workspace.user.uid, workspace.user.gid)
    subprocess.run(["bindfs", "-o", "allow_other", str(backing), str(mount_point)], check=True)
    try:
        yield mount_point / "data"
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_named_containers_on_a_network_data_path(images: dict[str, Path], workspace: Workspace,
                                                 network_data: Path) -> None:
    """create succeeds and every start works (it failed with a hint that blamed the kernel), the
    writes persist, list --fancy finds the running container, and doctor says what happens."""
    env = {"HYDRIA_DATA_PATH": str(network_data)}
    assert workspace.run("create", "--name", "shared", str(images["debian"]), **env).returncode == 0
    first = workspace.run("start", "--rw", "shared", "sh", "-c",
                          f"echo kept > /kept && rm -r /etc/issue /var/lib/apt && {ROOT_IS_FUSE_OVERLAY}", **env)
    assert first.returncode == 0 and first.stdout == "1\n", first.stderr
    again = workspace.run("start", "shared", "sh", "-c", "cat /kept; ls /etc/issue /var/lib/apt 2>&1 | wc -l", **env)
    assert again.returncode == 0 and again.stdout.split() == ["kept", "2"], again.stderr

    marker = workspace.out / "running"
    busy = workspace.popen("start", "-m", f"{workspace.out}:/out", "shared", "sh", "-c",
                           "touch /out/running; exec sleep 30", **env)
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = [line.split() for line in workspace.run("list", "--fancy", **env).stdout.splitlines()[1:]]
        assert [row[:3] for row in rows] == [["shared", str(busy.pid), "sleep"]]
    finally:
        busy.kill()
        busy.wait()
    assert live_processes(workspace.user) == []

    report = json.loads(workspace.run("doctor", "--json", **env).stdout)
    check = next(c for c in report["checks"] if c["name"] == "named containers")
    assert check["status"] == "warn" and "fuse-overlayfs" in check["detail"] and "fuse" in check["detail"]
    assert "HYDRIA_DATA_PATH" in check["fix"]


def test_a_colon_that_fuse_overlayfs_cannot_take_is_said_so(images: dict[str, Path], workspace: Workspace) -> None:
    """The kernel's overlay takes a container named with ':' (pytorch:24.01); fuse-overlayfs reads
    ':' in its folders as a separator ('cannot load store (null)'): the start says which folder."""
    assert workspace.run("create", "--name", "pytorch:24.01", str(images["busybox"])).returncode == 0
    assert workspace.run("start", "pytorch:24.01", "echo", "started").stdout == "started\n"
    refused = workspace.run("start", "pytorch:24.01", "true", HYDRIA_NATIVE_OVERLAYFS="n")
    assert refused.returncode == 1, refused.stderr
    assert "fuse-overlayfs cannot take" in refused.stderr and "pytorch:24.01/upper: it holds ':'" in refused.stderr
    assert "name the container without ':'" in refused.stderr and live_processes(workspace.user) == []
