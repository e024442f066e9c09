"""The InfiniBand hook in a real start, as the test user, on a fake node tree (testbed/fakeib.py,
through ``HYDRIA_RDMA_ROOT``): no InfiniBand card exists on the test machines. The fake device
nodes are plain files; a private /dev (``HYDRIA_RESTRICT_DEV``) receives them, as a node's real
/dev/infiniband would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed import fakeib
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


@pytest.fixture
def fake_node(workspace: Workspace) -> Path:
    root = fakeib.build(workspace.root / "node")
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    return root


def test_selected_devices_appear(images: dict[str, Path], workspace: Workspace, fake_node: Path) -> None:
    show = "cat /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm; test -e /dev/infiniband/uverbs0 || echo no-uverbs0"
    result = workspace.run("start", "-e", "MELLANOX_VISIBLE_DEVICES=1", str(images["busybox"]), "sh", "-c", show,
                           HYDRIA_RDMA_ROOT=str(fake_node), HYDRIA_RESTRICT_DEV="y")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["fake uverbs1", "fake rdma_cm", "no-uverbs0"]
    every = workspace.run("start", str(images["busybox"]), "ls", "/dev/infiniband",
                          HYDRIA_RDMA_ROOT=str(fake_node), HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="all")
    assert every.stdout.split() == ["rdma_cm", "uverbs0", "uverbs1"]


def test_unknown_device_and_none(images: dict[str, Path], workspace: Workspace, fake_node: Path) -> None:
    result = workspace.run("start", str(images["busybox"]), "true", HYDRIA_RDMA_ROOT=str(fake_node),
                           HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="2")
    assert result.returncode == 1 and "Unknown MELLANOX device id: 2" in result.stderr
    none = workspace.run("start", str(images["busybox"]), "sh", "-c", "test -e /dev/infiniband || echo none",
                         HYDRIA_RDMA_ROOT=str(fake_node), HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="none")
    assert none.stdout == "none\n"


def test_sharp_network_settings_reach_the_program(images: dict[str, Path], workspace: Workspace,
                                                  fake_node: Path) -> None:
    result = workspace.run("start", "-e", "NCCL_COLLNET_ENABLE=0", str(images["busybox"]), "sh", "-c",
                           "env | grep -E '^(SHARP|NCCL)_' | sort", HYDRIA_RDMA_ROOT=str(fake_node),
                           HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="all", SLURM_NETWORK="sharp",
                           SLURM_STEP_NUM_NODES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["NCCL_COLLNET_ENABLE=0", "NCCL_SHARP_GROUP_SIZE_THRESH=2",
                                     "SHARP_COLL_LOCK_ON_COMM_INIT=1",
                                     "SHARP_COLL_NUM_COLL_GROUP_RESOURCE_ALLOC_THRESHOLD=0"]


def test_mount_driver_brings_the_nodes_provider_libraries(images: dict[str, Path], workspace: Workspace,
                                                          fake_node: Path) -> None:
    """The node's real verbs providers (Debian's ibverbs-providers) reach a Debian image that has
    no rdma-core of its own; only the devices are fake."""
    libdir = f"/usr/local/lib/{os.uname().machine}-linux-gnu/mellanox"
    show = (f"cat /etc/libibverbs.d/mlx5.driver /etc/ld.so.conf.d/00-mellanox.conf; ls {libdir};"
            f"ldd {libdir}/libmlx5-rdmav*.so | grep -E 'lib(ibverbs|nl-3)'")
    result = workspace.run("start", "-e", "MELLANOX_MOUNT_DRIVER=1", str(images["debian"]), "sh", "-c", show,
                           HYDRIA_RDMA_ROOT=str(fake_node), HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"driver {libdir}/libmlx5", libdir]
    host_driver = max(Path(f"/usr/lib/{os.uname().machine}-linux-gnu/libibverbs").glob("libmlx5-*.so"))
    assert {host_driver.name, "libibverbs.so.1", "libibverbs.so", "libnl-3.so.200"} <= set(lines)
    resolved = {line.split()[0]: line.split()[2] for line in lines if "=>" in line}
    assert resolved == {"libibverbs.so.1": f"{libdir}/libibverbs.so.1", "libnl-3.so.200": f"{libdir}/libnl-3.so.200"}
    inside = workspace.run("start", str(images["debian"]), "sh", "-c", f"test -e {libdir} || echo absent",
                           HYDRIA_RDMA_ROOT=str(fake_node), HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="0")
    assert inside.stdout == "absent\n"  # without MELLANOX_MOUNT_DRIVER, nothing of the node's


def test_mount_driver_in_a_named_container_starts_again(images: dict[str, Path], workspace: Workspace,
                                                        fake_node: Path) -> None:
    """The .so links stay in the container's upper directory; the next start replaces them."""
    assert workspace.run("create", "--name", "ib", str(images["debian"])).returncode == 0
    libdir = f"/usr/local/lib/{os.uname().machine}-linux-gnu/mellanox"
    for _ in range(2):
        result = workspace.run("start", "ib", "readlink", f"{libdir}/libibverbs.so", HYDRIA_RDMA_ROOT=str(fake_node),
                               HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="0", MELLANOX_MOUNT_DRIVER="1")
        assert (result.returncode, result.stdout) == (0, "libibverbs.so.1\n"), result.stderr


def test_mount_driver_without_provider_config_fails_clearly(images: dict[str, Path], workspace: Workspace,
                                                             fake_node: Path) -> None:
    result = workspace.run("start", str(images["debian"]), "true", HYDRIA_RDMA_ROOT=str(fake_node),
                           HYDRIA_RESTRICT_DEV="y", MELLANOX_VISIBLE_DEVICES="all", MELLANOX_MOUNT_DRIVER="1",
                           MELLANOX_CONFIG_DIR=str(workspace.root / "nowhere"))
    assert result.returncode == 1
    assert f"Provider config not found: {workspace.root / 'nowhere'}/mlx5.driver" in result.stderr
