"""Two users importing one new image at once into a shared cache download each blob once: the
second waits for the first's announced download (hydria/image/downloads.py), and verifies what it
finds. The wait is bounded: a download that dies or stops progressing, or an announcement another
user forged, costs the waiter seconds, then it downloads the blob itself."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hydria.image.blobs.downloads import GRACE, STALE
from testbed.publish import PublishedImage, push_as
from testbed.registry import Registry
from testbed.stallproxy import StallProxy
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration
RATE = 128 << 10  # bytes a second: the first user's download runs for seconds


def layer_hex(busybox: PublishedImage) -> str:
    return busybox.image.layers[0].blob.digest.split(":")[1]


def made_folders(cache: Path) -> Path:
    """The shared cache's folders, as a first import makes them (sticky, writable by all); its locks folder."""
    for folder in (cache / "blobs", cache / "blobs" / "sha256", cache / "locks"):
        folder.mkdir(mode=0o1777)
        folder.chmod(0o1777)
    return cache / "locks"


def start_import(user: Workspace, uri: str, cache: Path, output: str) -> subprocess.Popen[str]:
    return user.popen("import", "-o", output, uri, HYDRIA_CACHE_PATH=str(cache))


def announced_by(cache: Path, hex_digest: str, user: Workspace, timeout: float = 30) -> Path:
    """The announcement of ``user``'s download, once it is there."""
    path = cache / "locks" / f"{hex_digest}.{user.user.uid}.active"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)
    return path


def finished(process: subprocess.Popen[str], timeout: float = 120) -> str:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    return err


def test_two_users_importing_at_once_download_each_blob_once(busybox: PublishedImage, registry: Registry,
                                                             workspace: Workspace, other_workspace: Workspace,
                                                             shared_cache: Path) -> None:
    push_as(busybox, registry, "twice", workspace.root)
    with StallProxy(registry.address, "blob-trickle", rate=RATE) as front:
        uri = f"docker://{front.address}#hydria/twice:latest"
        first = start_import(workspace, uri, shared_cache, "first.sqsh")
        announced_by(shared_cache, layer_hex(busybox), workspace)
        second = start_import(other_workspace, uri, shared_cache, "second.sqsh")
        finished(first)
        said = finished(second)
    assert registry.blob_fetches("hydria/twice")[busybox.image.layers[0].blob.digest] == 1
    assert f"Waiting for {workspace.user.name}'s download of {busybox.image.layers[0].blob.digest}" in said
    assert (workspace.out / "first.sqsh").read_bytes() == (other_workspace.out / "second.sqsh").read_bytes()
    assert list((shared_cache / "locks").glob("*.active")) == []


def test_a_waiter_downloads_itself_when_the_download_it_waits_for_dies(busybox: PublishedImage, registry: Registry,
                                                                       workspace: Workspace,
                                                                       other_workspace: Workspace,
                                                                       shared_cache: Path) -> None:
    push_as(busybox, registry, "died", workspace.root)
    with StallProxy(registry.address, "blob-trickle", rate=RATE // 4) as front:
        uri = f"docker://{front.address}#hydria/died:latest"
        first = start_import(workspace, uri, shared_cache, "first.sqsh")
        announced_by(shared_cache, layer_hex(busybox), workspace)
        second = start_import(other_workspace, uri, shared_cache, "second.sqsh")
        time.sleep(1)
        first.kill()  # as kill -9: its announcement stays, untouched from now on
        first.wait()
        front.rate = 1 << 30
        started = time.monotonic()
        said = finished(second)
    assert time.monotonic() - started < STALE + 20
    assert "by another user ended without the blob; downloading it" in said, said


def test_a_forged_announcement_delays_a_user_boundedly(busybox: PublishedImage, registry: Registry,
                                                       workspace: Workspace, other_workspace: Workspace,
                                                       shared_cache: Path) -> None:
    """Another user announces a download it never makes and keeps the announcement fresh."""
    uri = push_as(busybox, registry, "forged", workspace.root)
    locks = made_folders(shared_cache)
    forged = locks / f"{layer_hex(busybox)}.{other_workspace.user.uid}.active"
    made = run_as(other_workspace.user, ["sh", "-c", f"echo '1 0' > {forged}"])
    assert made.returncode == 0, made.stderr
    stop = threading.Event()

    def keep_fresh() -> None:
        while not stop.wait(1):
            os.utime(forged)

    fresher = threading.Thread(target=keep_fresh, daemon=True)
    fresher.start()
    try:
        started = time.monotonic()
        result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache), timeout=120)
        took = time.monotonic() - started
    finally:
        stop.set()
        fresher.join()
    assert result.returncode == 0, result.stderr
    assert f"Waiting for {other_workspace.user.name}'s download of" in result.stderr
    assert f"{other_workspace.user.name}'s download of sha256:{layer_hex(busybox)} hardly progresses; " \
           "downloading it" in result.stderr
    assert GRACE <= took < GRACE + 20


@pytest.mark.parametrize("plant", ["mkfifo {path}", "mkdir {path}", "ln -s /dev/zero {path}",
                                   "head -c 100000 /dev/urandom > {path}"])
def test_an_odd_announcement_neither_blocks_nor_fails_an_import(plant: str, busybox: PublishedImage,
                                                                registry: Registry, workspace: Workspace,
                                                                other_workspace: Workspace,
                                                                shared_cache: Path) -> None:
    """Another user plants something other than an announcement under an announcement's name."""
    uri = push_as(busybox, registry, "odd-announcement", workspace.root)
    locks = made_folders(shared_cache)
    for uid in (other_workspace.user.uid, workspace.user.uid):  # another's name, and the victim's own
        path = locks / f"{layer_hex(busybox)}.{uid}.active"
        made = run_as(other_workspace.user, ["sh", "-c", plant.format(path=path)])
        assert made.returncode == 0, made.stderr
    started = time.monotonic()
    result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache), timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert time.monotonic() - started < 30
