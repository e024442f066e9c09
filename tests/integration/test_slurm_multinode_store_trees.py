"""The image store's trees (plugstack ``store_trees``) in a step across two nodes of the test
cluster (testbed/slurm.py): every node's tasks stack the store's tree that the plugin mounted for
the step on that node. The test cluster's nodes share ``/run`` and ``/var/tmp``, which a real
cluster's nodes keep local: here both nodes' keepers write the one folder (each batch under the
tree's lock), and each node mounts it in its own mount namespace."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import slurm
from testbed.forwarding import Forwarder
from testbed.kept import wait_for_kept_file
from testbed.nodes import HEAD_ADDRESS
from testbed.oci import push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.users import STORE_USER
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

NODES = slurm.node_names(2)
TREES = Path("/var/tmp/hydria-test-store-trees-nodes")


@pytest.fixture(scope="module")
def cluster(hydria_bin: str) -> Iterator[None]:
    shutil.rmtree(TREES, ignore_errors=True)
    slurm.start(hydria_bin, count=2, plugin_options=[f"store_owner={STORE_USER}", f"store_trees={TREES}"])
    yield
    slurm.stop()
    shutil.rmtree(TREES, ignore_errors=True)


def test_every_node_of_a_step_stacks_the_stores_tree(cluster: None, busybox: PublishedImage, registry: Registry,
                                                     site_store: Path, store_workspace: Workspace,
                                                     workspace: Workspace, other_workspace: Workspace) -> None:
    push([busybox.image], registry.address, "hydria/store-trees-nodes", "latest", store_workspace.root)
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#hydria/store-trees-nodes:latest"
        store_workspace.fill_store(site_store, image)
        slurm.Submitter(workspace).ok("srun", "-N2", f"--container-image={image}", "sh", "-c",
                                      "cat /bin/busybox > /dev/null; sleep 7", HYDRIA_DATA_PATH="",
                                      HYDRIA_TESTBED_READ_CACHE=str(workspace.root / "read-cache"))
        assert len(wait_for_kept_file(TREES, "bin/busybox")) == 1, sorted(TREES.rglob("*"))
        out = slurm.Submitter(other_workspace).ok(
            "srun", "-N2", f"--container-image={image}", "sh", "-c",
            "echo $(hostname) $(grep -c 'lowerdir=/run/hydria-spank/store-trees/' /proc/self/mountinfo)",
            HYDRIA_DATA_PATH="", HYDRIA_TESTBED_READ_CACHE=str(other_workspace.root / "read-cache"))
    assert sorted(out.splitlines()) == [f"{node} 1" for node in NODES]
    assert "cannot mount it for the step" not in slurm.slurmd_logs()  # both nodes made the folder at once
    assert not list((workspace.root / "read-cache").glob("*/root"))
