"""A second user attacks the first through a shared cache (sticky and world-writable, as the docs
describe), with ``fs.protected_symlinks=0``: not every machine or file system has that protection,
and hydria must not depend on it. Every attack must neither poison nor block the victim's import."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.publish import PublishedImage, push_as
from testbed.registry import Registry
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration
PROTECTED_SYMLINKS = Path("/proc/sys/fs/protected_symlinks")


@pytest.fixture(autouse=True)
def unprotected_symlinks() -> Iterator[None]:
    before = PROTECTED_SYMLINKS.read_text()
    PROTECTED_SYMLINKS.write_text("0\n")
    yield
    PROTECTED_SYMLINKS.write_text(before)


@pytest.fixture(scope="module")
def uri(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> str:
    return push_as(busybox, registry, "attacked", image_workdir)


def layer_hex(busybox: PublishedImage) -> str:
    return busybox.image.layers[0].blob.digest.split(":")[1]


def attacker_prepares(attacker: Workspace, shared_cache: Path, script: str) -> None:
    """Run ``script`` as the attacker, with the cache's blob folders made (as a first import would)."""
    for sub in ("blobs/sha256", "locks"):
        (shared_cache / sub).mkdir(parents=True, exist_ok=True)
        for path in (shared_cache / sub, (shared_cache / sub).parent):
            path.chmod(0o1777)
    done = run_as(attacker.user, ["sh", "-c", script], cwd=shared_cache)
    assert done.returncode == 0, done.stderr


def victim_imports(victim: Workspace, uri: str, shared_cache: Path, output: str = "victim.sqsh",
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = victim.run("import", "-o", output, uri, HYDRIA_CACHE_PATH=str(shared_cache), timeout=timeout)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    listing = subprocess.run(["unsquashfs", "-l", str(victim.out / output)], capture_output=True, text=True,
                             check=True).stdout
    assert "squashfs-root/bin/busybox" in listing  # the image, not what the attacker planted
    return result


@pytest.mark.parametrize("plant", [
    "ln -s /etc/passwd {blob}",  # a link to a file the victim can read
    "mkfifo {blob}",  # a reader that opens it would wait forever
    "head -c 1000 /dev/zero > {blob}",  # wrong bytes the victim cannot delete
    "mkdir {blob}",
])
def test_a_planted_blob_entry_neither_poisons_nor_blocks(plant: str, uri: str, busybox: PublishedImage,
                                                         workspace: Workspace, other_workspace: Workspace,
                                                         shared_cache: Path) -> None:
    blob = shared_cache / "blobs" / "sha256" / layer_hex(busybox)
    attacker_prepares(other_workspace, shared_cache, plant.format(blob=blob))
    result = victim_imports(workspace, uri, shared_cache, timeout=60)
    assert result.stderr.count(f"Not using {blob} (owned by {other_workspace.user.name})") == 1


def test_a_link_to_the_victims_own_blob_is_not_trusted(uri: str, busybox: PublishedImage, debian: PublishedImage,
                                                       workspace: Workspace, other_workspace: Workspace,
                                                       shared_cache: Path) -> None:
    """The link's target belongs to the victim, which once made it look trusted."""
    seeded = workspace.run("import", "-o", "debian.sqsh", debian.docker_uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert seeded.returncode == 0, seeded.stderr
    blobs = shared_cache / "blobs" / "sha256"
    victims_own = blobs / debian.image.layers[0].blob.digest.split(":")[1]
    assert victims_own.stat().st_uid == workspace.user.uid
    attacker_prepares(other_workspace, shared_cache, f"ln -s {victims_own} {blobs / layer_hex(busybox)}")
    victim_imports(workspace, uri, shared_cache)


def test_a_lock_held_or_planted_by_another_user_does_not_block(uri: str, busybox: PublishedImage,
                                                               workspace: Workspace, other_workspace: Workspace,
                                                               shared_cache: Path) -> None:
    locks = shared_cache / "locks"
    hex_digest = layer_hex(busybox)
    victims_lock = locks / f"{hex_digest}.{workspace.user.uid}.lock"
    attacker_prepares(other_workspace, shared_cache,
                      f"touch {locks / hex_digest}.lock && chmod 666 {locks / hex_digest}.lock && touch {victims_lock}")
    holder = subprocess.Popen(  # holds both the old shared name's lock and the one planted under the victim's name
        ["python3", "-c", (f"import fcntl, time\na = open('{locks / hex_digest}.lock'); b = open('{victims_lock}')\n"
                           "fcntl.flock(a, fcntl.LOCK_EX); fcntl.flock(b, fcntl.LOCK_EX)\n"
                           "print('held', flush=True); time.sleep(600)")],
        user=other_workspace.user.uid, group=other_workspace.user.gid, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        result = victim_imports(workspace, uri, shared_cache, timeout=60)
        assert time.monotonic() - started < 30
        assert f"Not using the lock {victims_lock}: it belongs to {other_workspace.user.name}" in result.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_planted_as_a_link_creates_nothing_where_it_points(uri: str, busybox: PublishedImage,
                                                                  workspace: Workspace, other_workspace: Workspace,
                                                                  shared_cache: Path) -> None:
    aimed_at = workspace.root / "created-by-the-victim"
    victims_lock = shared_cache / "locks" / f"{layer_hex(busybox)}.{workspace.user.uid}.lock"
    attacker_prepares(other_workspace, shared_cache, f"ln -s {aimed_at} {victims_lock}")
    result = victim_imports(workspace, uri, shared_cache)
    assert not aimed_at.exists() and "Not using the lock" in result.stderr


def test_a_kept_image_planted_under_the_victims_key_is_not_used(uri: str, debian: PublishedImage,
                                                                workspace: Workspace, other_workspace: Workspace,
                                                                shared_cache: Path) -> None:
    """The attacker makes the victim's images folder first and links the (predictable) key of the
    image the victim will import to another image the victim owns."""
    probe = workspace.run("import", "-o", "probe.sqsh", uri)  # the key, as any user can compute it
    assert probe.returncode == 0, probe.stderr
    key = next((workspace.cache / f"images.{workspace.user.uid}").iterdir()).name.split(".")[0]
    other_image = workspace.out / "other.sqsh"
    done = workspace.run("import", "-o", str(other_image), debian.docker_uri)
    assert done.returncode == 0, done.stderr
    info = other_image.stat()
    folder = shared_cache / f"images.{workspace.user.uid}"
    link = folder / f"{key}.{info.st_size}.{info.st_mtime_ns}.sqsh"
    attacker_prepares(other_workspace, shared_cache, f"mkdir -m 777 {folder} && ln -s {other_image} {link}")
    result = victim_imports(workspace, uri, shared_cache)
    assert "Found the image in cache" not in result.stderr
    assert f"Not using the kept images in {folder}: it belongs to {other_workspace.user.name}" in result.stderr


@pytest.mark.parametrize("planted_by", ["attacker", "victim, writable by all"])
def test_a_planted_stage_broadcast_is_not_kept(planted_by: str, images: dict[str, Path], workspace: Workspace,
                                               other_workspace: Workspace, shared_cache: Path) -> None:
    """hydria stage's broadcast file has a name others can guess, in a node's /tmp: a file another
    user made there first (or one others can write) would become the victim's kept image of that
    digest, and its owner could rewrite it later. It is refused, and left as it is."""
    planted = shared_cache / f".hydria-stage-{workspace.user.uid}-7-0123456789abcdef.sqsh"
    owner = other_workspace.user if planted_by == "attacker" else workspace.user
    copy = run_as(owner, ["sh", "-c", f"cp {images['busybox']} {planted} && chmod 666 {planted}"])
    assert copy.returncode == 0, copy.stderr
    result = workspace.run("stage", "--adopt", str(planted), "--digest", f"sha256:{'ab' * 32}",
                           "docker://registry.example#team/app:1")
    assert result.returncode == 1
    assert f"{planted} is not a file of yours alone (owner {owner.name}, mode 0666, 1 links): not kept" in result.stderr
    assert planted.exists() and not list(workspace.cache.rglob("*.sqsh"))
