"""The InfiniBand hook in a real start, as the test user, on a fake node tree (testbed/fakeib.py,
through ``HYDRIA_RDMA_ROOT``): no InfiniBand card exists on the test machines. The fake device
nodes are plain files; a private /dev (``HYDRIA_RESTRICT_DEV``) receives them, as a node's real
/dev/infiniband would."""

from __future__ import annotations

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
