"""The image store's trees kept once per node (plugstack ``store_trees``, container/store_trees.py)
on a real single-node Slurm cluster: what one user's step read of a store image is kept by the
store's account, and another user's step reads it from there, as their own files, read-only."""

from __future__ import annotations

import concurrent.futures
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import slurm
from testbed.kept import wait_for_kept_file
from testbed.oci import push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.users import STORE_USER, User, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

TREES = Path("/var/tmp/hydria-test-store-trees")  # plugstack store_trees: node-local
MOUNTS = Path("/run/hydria-spank/store-trees")  # where the plugin mounts it for each step


@pytest.fixture(scope="module")
def cluster(hydria_bin: str) -> Iterator[None]:
    shutil.rmtree(TREES, ignore_errors=True)
    slurm.start(hydria_bin, plugin_options=[f"store_owner={STORE_USER}", f"store_trees={TREES}"])
    yield
    slurm.stop()
    shutil.rmtree(TREES, ignore_errors=True)


@pytest.fixture(params=["layered", "one image file"])
def stored_image(request: pytest.FixtureRequest, cluster: None, busybox: PublishedImage, registry: Registry,
                 site_store: Path, store_workspace: Workspace) -> str:
    """The busybox image in the site's image store, as a step names it, kept by the store as a
    layered image or as one image file (HYDRIA_LAYERED_IMAGES of its import)."""
    for kept in TREES.glob("*"):  # another image's trees: each test sees what its own steps keep
        shutil.rmtree(kept) if kept.is_dir() else kept.unlink()
    layered = request.param == "layered"
    repository = f"hydria/store-trees-{'layered' if layered else 'file'}"
    push([busybox.image], registry.address, repository, "latest", store_workspace.root)
    image = f"{registry.address}#{repository}:latest"
    store_workspace.fill_store(site_store, image, HYDRIA_LAYERED_IMAGES="y" if layered else "n")
    suffix = ".layers" if layered else ".sqsh"
    assert [path.suffix for path in (site_store / "images").iterdir() if not path.name.startswith("layer-")] == [suffix]
    return image


def test_what_one_users_step_read_serves_every_users_steps(stored_image: str, workspace: Workspace,
                                                           other_workspace: Workspace, store_user: User) -> None:
    first = slurm.Submitter(workspace).run("srun", f"--container-image={stored_image}", "sh", "-c",
                                           "cat /bin/busybox > /dev/null; sleep 7",
                                           HYDRIA_TESTBED_READ_CACHE=str(workspace.root / "read-cache"))
    assert first.returncode == 0, first.stderr
    kept = wait_for_kept_file(TREES, "bin/busybox")
    assert len(kept) == 1, sorted(TREES.rglob("*"))
    assert kept[0].stat().st_uid == store_user.uid and TREES.stat().st_mode & 0o777 == 0o700
    assert not list((workspace.root / "read-cache").glob("*/root"))  # not kept once more for the user
    # Another user's step stacks the node's tree (its overlay's lower layers name the step's mount)
    # and sees its files as it sees the image's: its own (one ID mapped), with the image's mode.
    second = slurm.Submitter(other_workspace).run(
        "srun", f"--container-image={stored_image}", "sh", "-c",
        "grep -o 'lowerdir=[^,]*' /proc/self/mountinfo; stat -c '%u %a' /bin/busybox; /bin/busybox true && echo ran",
        HYDRIA_TESTBED_READ_CACHE=str(other_workspace.root / "read-cache"))
    assert second.returncode == 0, second.stderr
    assert f"{MOUNTS}/" in second.stdout and "/root:" in second.stdout, second.stdout
    assert second.stdout.splitlines()[-2:] == [f"{other_workspace.user.uid} {kept[0].stat().st_mode & 0o7777:o}",
                                               "ran"]
    assert list(MOUNTS.iterdir()) == []  # each step's mount went with it
    assert "store-trees" not in Path("/proc/self/mountinfo").read_text()


def test_the_steps_mount_is_read_only_and_its_users_alone(stored_image: str, workspace: Workspace,
                                                          other_workspace: Workspace) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        step = pool.submit(slurm.Submitter(workspace).run, "srun", f"--container-image={stored_image}", "sleep", "8")
        deadline = time.monotonic() + 60
        while not (mounts := list(MOUNTS.glob("*"))) and time.monotonic() < deadline and not step.done():
            time.sleep(0.2)
        assert len(mounts) == 1, step.result().stderr if step.done() else "no mount"
        owner = run_as(workspace.user, ["touch", str(mounts[0] / "planted")])
        assert owner.returncode != 0 and "Read-only file system" in owner.stderr, owner.stderr
        other = run_as(other_workspace.user, ["ls", str(mounts[0])])
        assert other.returncode != 0 and "Permission denied" in other.stderr, other.stderr
        assert step.result().returncode == 0, step.result().stderr
    assert not (TREES / "planted").exists() and list(MOUNTS.iterdir()) == []


def test_the_keeper_keeps_nothing_of_an_image_the_store_lacks(stored_image: str, store_workspace: Workspace,
                                                              site_store: Path, images: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """What a user passes to the keeper names a tree only of the store's own images: the key of a
    file of theirs (here the test images' busybox, not in the store) or no key keeps nothing."""
    from hydria.container.read_cache import image_key

    trees = tmp_path / "trees"
    trees.mkdir(mode=0o700)
    shutil.chown(trees, store_workspace.user.name, store_workspace.user.name)
    for named in (f"{image_key(str(images['busybox']))}\n0 1\n0 2\n", "0 1\n", ""):
        kept = run_as(store_workspace.user, ["sh", "-c", f'exec "$0" store keep-reads --trees {trees} --reads-fd 0',
                                             store_workspace.hydria], input=named,
                      env=store_workspace.env(HYDRIA_READ_CACHE_PATH=str(trees), HYDRIA_STORE_PATH=str(site_store)))
        assert kept.returncode == 0 and kept.stderr == "", kept.stderr
        assert list(trees.iterdir()) == []
