"""Images kept in the cache: importing a registry image again is a hardlink to the last import
(a copy across file systems), never an image that changed since, and the cache stays bounded."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.oci import push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

FOUND = "Found the image in cache"


def kept_images(workspace: Workspace) -> list[Path]:
    directory = workspace.cache / f"images.{workspace.user.uid}"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def files_of(image: Path) -> str:
    return subprocess.run(["unsquashfs", "-lls", str(image)], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def uri(busybox: PublishedImage, registry: Registry, workspace: Workspace) -> str:
    """busybox under a repository of this test's own, so that its blob fetches can be counted."""
    repository = f"hydria/kept{uuid.uuid4().hex[:12]}"
    push([busybox.image], registry.address, repository, "latest", workspace.root)
    return f"docker://{registry.address}#{repository}:latest"


def test_importing_again_links_the_kept_image(busybox: PublishedImage, uri: str, registry: Registry,
                                              workspace: Workspace) -> None:
    first = workspace.run("import", "-o", "first.sqsh", uri)
    assert first.returncode == 0 and FOUND not in first.stderr, first.stderr
    (kept,) = kept_images(workspace)
    assert kept.stat().st_mode & 0o777 == 0o644 and kept.parent.stat().st_mode & 0o777 == 0o700
    for blob in (workspace.cache / "blobs" / "sha256").iterdir():
        blob.unlink()  # the layers are not needed again
    second = workspace.run("import", "-o", "second.sqsh", uri)
    assert second.returncode == 0 and FOUND in second.stderr, second.stderr
    assert (workspace.out / "second.sqsh").stat().st_ino == (workspace.out / "first.sqsh").stat().st_ino
    repository = uri.split("#")[1].split(":")[0]
    assert registry.blob_fetches(repository)[busybox.image.layers[0].blob.digest] == 1  # by the first import
    started = run_as(workspace.user, [workspace.hydria, "start", str(workspace.out / "second.sqsh"), "cat", "/etc/rc"],
                     env=workspace.env())
    assert started.returncode == 0 and f"hydria-provenance: {uri}" in started.stdout, started.stderr


def test_an_image_written_to_since_is_not_used(uri: str, workspace: Workspace) -> None:
    assert workspace.run("import", "-o", "first.sqsh", uri).returncode == 0
    pristine = files_of(workspace.out / "first.sqsh")
    # cp over an existing file writes into the same inode: the kept entry changes with it
    overwrite = run_as(workspace.user, ["sh", "-c", "head -c 100000 /dev/zero > first.sqsh"], cwd=workspace.out)
    assert overwrite.returncode == 0
    again = workspace.run("import", "-o", "again.sqsh", uri)
    assert again.returncode == 0 and FOUND not in again.stderr, again.stderr
    assert files_of(workspace.out / "again.sqsh") == pristine
    (kept,) = kept_images(workspace)
    assert kept.stat().st_ino == (workspace.out / "again.sqsh").stat().st_ino


def test_other_squash_options_make_another_image(uri: str, workspace: Workspace) -> None:
    assert workspace.run("import", "-o", "zstd.sqsh", uri).returncode == 0
    lz4 = workspace.run("import", "-o", "lz4.sqsh", uri, HYDRIA_SQUASH_OPTIONS="-comp lz4")
    assert lz4.returncode == 0 and FOUND not in lz4.stderr
    assert "lz4" in subprocess.run(["unsquashfs", "-s", str(workspace.out / "lz4.sqsh")],
                                   capture_output=True, text=True, check=True).stdout
    assert len(kept_images(workspace)) == 2


def test_the_setting_bounds_the_kept_images(busybox: PublishedImage, debian: PublishedImage, uri: str,
                                            workspace: Workspace) -> None:
    assert workspace.run("import", "-o", "a.sqsh", uri, HYDRIA_CACHE_IMAGES="1").returncode == 0
    assert workspace.run("import", "-o", "b.sqsh", debian.docker_uri, HYDRIA_CACHE_IMAGES="1").returncode == 0
    (kept,) = kept_images(workspace)
    assert kept.stat().st_ino == (workspace.out / "b.sqsh").stat().st_ino
    off = workspace.run("import", "-o", "c.sqsh", debian.docker_uri, HYDRIA_CACHE_IMAGES="0")
    assert off.returncode == 0 and FOUND not in off.stderr
    assert (workspace.out / "c.sqsh").stat().st_ino != kept.stat().st_ino


@pytest.fixture
def other_disk(workspace: Workspace) -> Iterator[Path]:
    """A tmpfs: another file system than the cache's, where no hardlink can reach."""
    mount = workspace.root / "other"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,uid={workspace.user.uid}", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_across_file_systems_the_image_is_copied(uri: str, workspace: Workspace, other_disk: Path) -> None:
    first = workspace.run("import", "-o", str(other_disk / "first.sqsh"), uri)
    assert first.returncode == 0, first.stderr
    (kept,) = kept_images(workspace)
    assert kept.stat().st_dev != (other_disk / "first.sqsh").stat().st_dev
    second = workspace.run("import", "-o", str(other_disk / "second.sqsh"), uri)
    assert second.returncode == 0 and FOUND in second.stderr
    assert (other_disk / "second.sqsh").read_bytes() == kept.read_bytes() == (other_disk / "first.sqsh").read_bytes()


def test_users_keep_their_own_images(uri: str, workspace: Workspace, other_workspace: Workspace,
                                     shared_cache: Path) -> None:
    assert workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache)).returncode == 0
    theirs = other_workspace.run("import", "-o", "theirs.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert theirs.returncode == 0 and FOUND not in theirs.stderr  # never another user's image
    for user in (workspace.user, other_workspace.user):
        own = shared_cache / f"images.{user.uid}"
        assert own.stat().st_uid == user.uid and own.stat().st_mode & 0o777 == 0o700
    mine = shared_cache / f"images.{workspace.user.uid}"
    assert run_as(other_workspace.user, ["ls", str(mine)]).returncode != 0
    assert run_as(other_workspace.user, ["mv", str(mine), str(shared_cache / "stolen")]).returncode != 0


def test_a_directory_planted_by_another_user_is_not_used(uri: str, workspace: Workspace,
                                                         other_workspace: Workspace, shared_cache: Path) -> None:
    planted = shared_cache / f"images.{workspace.user.uid}"
    assert run_as(other_workspace.user, ["mkdir", "-m", "777", str(planted)]).returncode == 0
    result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert result.returncode == 0, result.stderr
    assert f"Not using the kept images in {planted}: it belongs to {other_workspace.user.name}" in result.stderr
    assert list(planted.iterdir()) == []


def test_existing_output_is_still_refused(uri: str, workspace: Workspace) -> None:
    assert workspace.run("import", "-o", "first.sqsh", uri).returncode == 0
    (workspace.out / "taken.sqsh").write_text("mine")
    os.chown(workspace.out / "taken.sqsh", workspace.user.uid, workspace.user.gid)
    again = workspace.run("import", "-o", "taken.sqsh", uri)
    assert again.returncode == 1 and "File already exists" in again.stderr
    assert (workspace.out / "taken.sqsh").read_text() == "mine"


def test_cache_list_and_prune(uri: str, workspace: Workspace) -> None:
    assert workspace.run("import", "-o", "one.sqsh", uri).returncode == 0
    listed = json.loads(workspace.run("cache", "list", "--json").stdout)
    assert listed["blobs"] >= 2 and listed["images"] == 1 and listed["blob_bytes"] > 0
    kept = next((workspace.cache / f"images.{workspace.user.uid}").iterdir())
    fresh = workspace.run("cache", "prune")
    assert fresh.returncode == 0 and "removed 0 file(s)" in fresh.stdout  # all used in the last minutes
    blobs = list((workspace.cache / "blobs" / "sha256").iterdir())
    for path in (*blobs, kept):
        when = time.time() - 3600
        os.utime(path, (when, when))
    dry = workspace.run("cache", "prune", "--dry-run")
    assert f"would remove {len(blobs) + 1} file(s)" in dry.stdout and kept.exists()
    pruned = workspace.run("cache", "prune")
    assert pruned.returncode == 0 and f"removed {len(blobs) + 1} file(s)" in pruned.stdout
    assert json.loads(workspace.run("cache", "list", "--json").stdout)["blobs"] == 0 and not kept.exists()
    assert (workspace.out / "one.sqsh").is_file()  # the imported image itself is the user's file
    bad = workspace.run("cache", "prune", "--to", "lots")
    assert bad.returncode == 1 and "not a size" in bad.stderr
