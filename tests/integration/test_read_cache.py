"""The read cache (container/read_cache.py): what a container that runs for a while reads of its
image is kept on node-local disk behind it, and later starts read those files from the tree, at
the disk's speed, and the rest through the reader. The tree above the image must show the
container exactly what the image does; it holds no file that nobody read; the unpack must never
outlive its container, trust a folder that is not the user's, fill the disk, nor take a tree that
a container uses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from hydria.container.read_cache import UNPACK_AFTER, free_and_reserve
from hydria.units import format_size
from testbed.kept import entries
from testbed.oci import Image, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.users import User, live_processes, run_as
from testbed.workspace import Workspace
from tests.integration.test_layered_images import _layer, layered_import
from tests.integration.test_reader import MANIFEST, damaged_copy, host_manifest, tree_image  # noqa: F401
from tests.integration.test_reader import READ_CACHE_OFF as OFF

pytestmark = pytest.mark.integration


CACHE_DISK = "1g"  # the read cache's own file system in these tests: a tenth of it stays free


@contextmanager
def cache_on_own_disk(workspace: Workspace) -> Iterator[None]:
    """The workspace's read cache on a file system of its own, as on a node's local disk. An
    unpack leaves a tenth of its file system free, and how full the host's disk is must not
    decide these tests (CI once had less than a tenth free: no unpack, nine tests failed)."""
    folder, user = workspace.unpacked, workspace.user
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={CACHE_DISK},mode=0700,uid={user.uid},gid={user.gid}",
                    "tmpfs", str(folder)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(autouse=True)
def cache_disk(workspace: Workspace) -> Iterator[None]:
    with cache_on_own_disk(workspace):
        yield


READ = ("/etc/passwd",)  # a file (no link) of every test image, which the helpers' containers read


def keep_behind(workspace: Workspace, image: str, reads: Sequence[str] = READ, timeout: float = 120,
                **env: str) -> Path:
    """Start ``image``, read the files ``reads`` names and stay until the read cache keeps them,
    as a job's first start on a node does; the entry that keeps them."""
    return keep_layers_behind(workspace, image, 1, reads, timeout, **env)[0]


def keep_layers_behind(workspace: Workspace, image: str, count: int, reads: Sequence[str] = READ,
                       timeout: float = 120, **env: str) -> list[Path]:
    """``keep_behind`` that waits for ``count`` new entries (0: for what was read to be in any
    tree, as when a later start adds to the one there); those entries (0: those that hold it)."""
    folder = Path(env.get("HYDRIA_READ_CACHE_PATH", workspace.unpacked))
    before = entries(folder)
    command = 'cat "$@" > /dev/null; exec sleep 600'
    process = workspace.popen("start", image, "sh", "-c", command, "sh", *reads, **env)
    try:
        deadline = time.monotonic() + timeout
        while not _kept(folder, before, count, reads) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert live_processes(workspace.user) == []
    assert _kept(folder, before, count, reads), sorted(os.listdir(folder))
    if not count:
        return [entry for entry in entries(folder) if any((entry / "root" / path.lstrip("/")).is_file()
                                                          for path in reads)]
    found = [entry for entry in entries(folder) if entry not in before]
    assert len(found) == count, sorted(os.listdir(folder))
    return found


def _kept(folder: Path, before: list[Path], count: int, reads: Sequence[str]) -> bool:
    """Whether ``count`` new entries are there and the files ``reads`` names are in the trees
    (``count`` 0: in any tree)."""
    new = [entry for entry in entries(folder) if entry not in before] if count else entries(folder)
    return len(new) >= count and all(any((entry / "root" / path.lstrip("/")).is_file() for entry in new)
                                     for path in reads)


def lower_layers(workspace: Workspace, target: str, **env: str) -> list[str]:
    """The lower layers of the container's root overlay, the topmost first, as its mount table says."""
    return lower_layer(workspace, target, **env).split(":")


def lower_layer(workspace: Workspace, target: str, **env: str) -> str:
    """The lower layers of the container's root overlay, as its mount table says."""
    result = workspace.run("start", target, "cat", "/proc/self/mountinfo", **env)
    assert result.returncode == 0, result.stderr
    root = next(line for line in result.stdout.splitlines() if line.split()[4] == "/")
    return next(o for o in root.split(" - ")[1].split()[2].split(",") if o.startswith("lowerdir="))[9:]


@pytest.mark.parametrize("remap", [False, True], ids=["user", "root"])
def test_a_later_start_reads_what_the_first_read_from_the_tree(
        remap: bool, tree_image: tuple[Path, Path], workspace: Workspace) -> None:  # noqa: F811
    image, data = tree_image
    files = {str(path.relative_to(data.parent)) for path in data.rglob("*")
             if path.is_file() and not path.is_symlink() and path.stat().st_size}  # an empty file is never read
    entry = keep_behind(workspace, str(image), reads=["/etc/passwd", *(f"/{name}" for name in sorted(files))])
    assert entry.stat().st_mode & 0o777 == 0o700 and entry.parent.stat().st_mode & 0o777 == 0o700
    layers = lower_layers(workspace, str(image))
    assert len(layers) == 2 and layers[0] == str(entry / "root"), "the tree right above the image's mount"
    # It keeps what was read, and the folders that hold it: nothing else of the image.
    kept = {str(path.relative_to(entry / "root")) for path in (entry / "root").rglob("*")}
    assert files <= kept and {"etc/passwd", "data"} <= kept
    # Besides: the shell, cat and sleep, their libraries, and what /etc/rc reads (never /usr/share).
    assert all(name.startswith(("data", "etc", "usr")) and not name.startswith("usr/share") for name in kept), kept
    assert int((entry / "size").read_text()) >= sum(os.lstat(entry / "root" / name).st_blocks * 512 for name in files)
    options = ["--root"] if remap else []
    result = workspace.run("start", *options, str(image), "python3", "-c", MANIFEST, "/data")
    assert result.returncode == 0, result.stderr
    owner = (0, 0) if remap else (workspace.user.uid, workspace.user.gid)
    assert json.loads(result.stdout) == host_manifest(data, *owner)
    # Writes go to the container's overlay, never into the shared tree.
    written = workspace.run("start", "--rw", str(image), "sh", "-c",
                            "echo changed > /data/text; rm /data/private; cat /data/text")
    assert written.stdout == "changed\n", written.stderr
    assert (entry / "root" / "data" / "private").exists()
    assert (entry / "root" / "data" / "text").read_text() == (data / "text").read_text()


def test_what_later_starts_read_is_added_to_the_tree(images: dict[str, Path], workspace: Workspace) -> None:
    """A later start that reads other files adds them to the tree that the first made; the
    folders that gain files keep the image's times and modes."""
    image = str(images["debian"])
    entry = keep_behind(workspace, image, reads=["/etc/host.conf", "/etc/apt/sources.list", "/usr/bin/env"])
    assert not (entry / "root" / "etc" / "debian_version").exists()
    (later,) = keep_layers_behind(workspace, image, 0, reads=["/etc/debian_version", "/etc/dpkg/dpkg.cfg"])
    assert later == entry and {"host.conf", "debian_version", "apt", "dpkg"} <= set(os.listdir(entry / "root" / "etc"))
    # A folder's size is its file system's. / and /etc are left to the tree's own check: a start
    # writes in them (the image's /data volume, /etc/hosts), which gives them the start's time.
    look = ("stat -c '%n %a %Y %U' /etc/apt /etc/dpkg /usr /usr/bin; "
            "stat -c '%n %a %s %Y %U %h' /etc/debian_version /etc/host.conf /etc/dpkg/dpkg.cfg /usr/bin/env")
    shown = workspace.run("start", image, "sh", "-c", look)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == workspace.run("start", image, "sh", "-c", look, **OFF).stdout
    times = folder_times(image)
    for folder in (".", "etc", "etc/dpkg", "usr/bin"):
        assert int(os.stat(entry / "root" / folder).st_mtime) == times[folder], folder


def folder_times(image: str) -> dict[str, int]:
    """The modification time that the squashfs ``image`` gives each of its folders ("." its root)."""
    reader = subprocess.Popen(["sqfs2tar", "--root-becomes", ".", image], stdout=subprocess.PIPE)
    assert reader.stdout is not None
    with tarfile.open(fileobj=reader.stdout, mode="r|") as tar:
        times = {os.path.normpath(member.name): int(member.mtime) for member in tar if member.isdir()}
    assert reader.wait() == 0
    return times


def test_a_named_container_keeps_its_writes_from_either_lower_layer(
        tree_image: tuple[Path, Path], workspace: Workspace) -> None:  # noqa: F811
    image, _ = tree_image
    assert workspace.run("create", "-n", "kept", str(image)).returncode == 0
    first = workspace.run("start", "--rw", "kept", "sh", "-c", "echo 0 >> /etc/written; rm /data/private")
    assert first.returncode == 0, first.stderr
    entry = keep_behind(workspace, "kept", reads=["/data/text", "/data/tool"])
    assert lower_layers(workspace, "kept")[0] == str(entry / "root")
    result = workspace.run("start", "--rw", "kept", "sh", "-c",
                           "echo 1 >> /etc/written; cat /etc/written; test -e /data/private || echo removed")
    assert result.stdout == "0\n1\nremoved\n", result.stderr
    again = workspace.run("start", "kept", "cat", "/etc/written", **OFF)  # read through the reader again
    assert again.stdout == "0\n1\n", again.stderr


def test_a_layered_image_keeps_what_is_read_in_one_tree_above_its_one_mount(
        busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path) -> None:
    """A layered image is one mount (the reader merges its layer images) with one tree above it.
    A new version that shares a layer gets a tree of its own: a file of the shared layer that the
    old version read may be one that the new version deletes."""
    tmp_path.chmod(0o755)
    data = _layer(tmp_path, "data", {"opt/data/old": b"old\n", "opt/data/kept": b"kept\n"})
    update = _layer(tmp_path, "update", {"opt/data/new": b"new\n"}, whiteouts=("opt/data/old",))
    repository = f"hydria/unpacked{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin:/usr/bin"]}
    base = busybox.image.layers
    push([Image([*base, data], config)], registry.address, repository, "v1", workspace.root)
    push([Image([*base, data, update], config)], registry.address, repository, "v2", workspace.root)
    images = []
    for tag in ("v1", "v2"):
        imported = layered_import(workspace, f"docker://{registry.address}#{repository}:{tag}")
        assert imported.returncode == 0, imported.stderr
        images.append(imported.stdout.strip())
    v1, v2 = images

    old = keep_behind(workspace, v1, reads=["/opt/data/old", "/opt/data/kept", "/bin/busybox"])
    assert sorted(os.listdir(old / "root" / "opt" / "data")) == ["kept", "old"]
    lowers = lower_layers(workspace, v1)
    assert len(lowers) == 2 and lowers[0] == str(old / "root"), "its tree right above its one mount"
    new = keep_behind(workspace, v2, reads=["/opt/data/new", "/opt/data/kept"])
    assert new != old and sorted(os.listdir(new / "root" / "opt" / "data")) == ["kept", "new"]
    assert lower_layers(workspace, v2)[0] == str(new / "root")
    shown = workspace.run("start", v2, "sh", "-c", "ls /opt/data; cat /opt/data/new /opt/data/kept")
    assert shown.stdout == "kept\nnew\nnew\nkept\n", shown.stderr  # the deletion of /opt/data/old holds
    shown = workspace.run("start", v1, "cat", "/opt/data/old")
    assert shown.stdout == "old\n", shown.stderr


def test_short_starts_unpack_nothing(images: dict[str, Path], workspace: Workspace) -> None:
    for _ in range(3):
        assert workspace.run("start", str(images["busybox"]), "true").returncode == 0
    assert not workspace.unpacked.exists() or os.listdir(workspace.unpacked) == []
    assert live_processes(workspace.user) == []


def test_the_containers_program_finds_no_ended_child_of_the_start(images: dict[str, Path],
                                                                   workspace: Workspace) -> None:
    """The child that forks the unpacker (and ends at once) is collected before the container's
    program runs: a program that waits for all its children, or counts them, finds none that ended.
    Its one child from the start is the image's reader, which serves for as long as it runs."""
    script = ('read -r children < /proc/$$/task/$$/children; '  # before any child of its own: sh collects all
              'for child in $children; do read -r stat < /proc/$child/stat; echo "${stat##*) }"; done')
    result = workspace.run("start", str(images["busybox"]), "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    states = [line.split()[0] for line in result.stdout.splitlines()]
    assert len(states) == 1 and states[0] != "Z", result.stdout


def tool_wrapper(workspace: Workspace, script: str) -> str:
    """A PATH whose ``unsquashfs`` runs ``script`` (sh) before the real one."""
    folder = workspace.root / "bin"
    folder.mkdir(mode=0o755)
    (folder / "unsquashfs").write_text(f'#!/bin/sh\n{script}\nexec /usr/bin/unsquashfs "$@"\n')
    (folder / "unsquashfs").chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


@contextmanager
def busy_node() -> Iterator[None]:
    """Every CPU kept busy (twice over) at normal priority, as on a node where a job computes."""
    burners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def test_the_unpacker_names_itself_and_ends_within_a_second_of_its_container_on_a_busy_node(
        images: dict[str, Path], workspace: Workspace) -> None:
    """``pkill -f`` on the job's command finds the container's process only; the unpacker, at
    idle priority, ends with the container whatever the load and wherever it is."""
    path = tool_wrapper(workspace, "sleep 300")
    marker = "job-marker"
    command = f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}; : {marker}"
    with busy_node():
        process = workspace.popen("start", str(images["busybox"]), "sh", "-c", command, PATH=path)
        time.sleep(UNPACK_AFTER + 1.5)
        found = subprocess.run(["pgrep", "-a", "-u", str(workspace.user.uid), "-f", marker],
                               capture_output=True, text=True, check=False).stdout.splitlines()
        unpacker = subprocess.run(["pgrep", "-a", "-u", str(workspace.user.uid), "hydria-unpack"],
                                  capture_output=True, text=True, check=False).stdout.splitlines()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        left = live_processes(workspace.user, wait=1)
    assert [line.split(" ", 1)[1] for line in found] == [f"sh -c {command}"], found
    names = sorted(line.split(" ", 1)[1].rstrip() for line in unpacker)
    assert names == [f"hydria-unpack {images['busybox']}", f"hydria-unpack {images['busybox']} (worker)"], unpacker
    assert left == []


def test_an_unpack_ends_with_its_container_and_the_next_one_cleans_up(images: dict[str, Path],
                                                                       workspace: Workspace) -> None:
    path = tool_wrapper(workspace, "sleep 300")  # the real unsquashfs, made slow: the container ends first
    process = workspace.popen("start", str(images["busybox"]), "sh", "-c",
                              f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}", PATH=path)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert live_processes(workspace.user, wait=5) == []  # neither the unpacker nor its unsquashfs
    left = os.listdir(workspace.unpacked)
    assert [name for name in left if name.endswith(".unpacking")], left
    assert entries(workspace.unpacked) == []
    entry = keep_behind(workspace, str(images["busybox"]))
    assert sorted(os.listdir(workspace.unpacked)) == [entry.name, entry.name + ".lock"]


# PID 1 of a PID namespace that collects no process but the one it started (as slurmd or a
# container's shell may be): it prints what is left in the namespace once that one has ended.
NON_REAPING_PID_1 = """
import json, subprocess, sys, time
start = json.load(sys.stdin)
subprocess.Popen(start["argv"], user=start["uid"], group=start["gid"], extra_groups=[], env=start["env"],
                 cwd=start["cwd"]).wait()
time.sleep(2)
subprocess.run(["ps", "-e", "-o", "stat=,comm="])
"""


def test_what_an_unpack_ran_is_collected_under_a_pid_1_that_reaps_nothing(images: dict[str, Path],
                                                                          workspace: Workspace) -> None:
    """The container ends while the unpack's tools run: they are killed and collected by the
    unpacker, not left as zombies to a PID 1 that never collects them."""
    path = tool_wrapper(workspace, "sleep 300")
    start = {"argv": [str(workspace.hydria), "start", str(images["busybox"]), "sh", "-c",
                      f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}"],
             "uid": workspace.user.uid, "gid": workspace.user.gid, "cwd": str(workspace.out),
             "env": workspace.user.environment(workspace.env(PATH=path))}
    listing = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", NON_REAPING_PID_1],
                             input=json.dumps(start), capture_output=True, text=True, timeout=60, check=True).stdout
    left = [(line.split()[0], line.split()[1]) for line in listing.splitlines()]  # "NAME <defunct>": NAME
    assert [name for state, name in left if state.startswith("Z") and not name.startswith("hydria-")] == [], listing
    assert [name for state, name in left[1:] if not state.startswith("Z")] == ["ps"], listing  # past PID 1


@pytest.fixture
def other_cache_disk(other_workspace: Workspace) -> Iterator[None]:
    with cache_on_own_disk(other_workspace):
        yield


@pytest.mark.usefixtures("other_cache_disk")
def test_a_folder_that_is_not_the_users_is_never_trusted(
        images: dict[str, Path], workspace: Workspace, other_workspace: Workspace) -> None:
    image = str(images["busybox"])
    planted = keep_behind(other_workspace, image)
    (planted / "root" / "etc").mkdir(exist_ok=True)
    (planted / "root" / "etc" / "planted").write_text("not from the image\n")
    other_workspace.unpacked.chmod(0o755)
    planted.chmod(0o755)
    (planted / "root").chmod(0o755)
    folder = {"HYDRIA_READ_CACHE_PATH": str(other_workspace.unpacked)}
    result = workspace.run("start", image, "sh", "-c", "cat /etc/planted || echo absent", **folder)
    assert result.stdout == "absent\n"
    assert f"{other_workspace.unpacked} (HYDRIA_READ_CACHE_PATH) belongs to {other_workspace.user.name}" \
        in result.stderr
    # A link (someone else's, in a shared /var/tmp) to a folder of the user's is not the folder
    # either: never read from, never written through.
    os.symlink(workspace.unpacked, workspace.root / "link")
    keep_behind(workspace, image)
    linked = workspace.run("start", image, "cat", "/proc/self/mountinfo", HYDRIA_READ_CACHE_PATH=str(workspace.root / "link"))
    assert "is not a folder" in linked.stderr and str(workspace.unpacked) not in linked.stdout
    victim = workspace.root / "victim"
    victim.mkdir(mode=0o700)
    os.chown(victim, workspace.user.uid, workspace.user.gid)
    os.symlink(victim, workspace.root / "planted-link")
    long = workspace.run("start", image, "sh", "-c", f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}",
                         HYDRIA_READ_CACHE_PATH=str(workspace.root / "planted-link"))
    assert long.returncode == 0 and "is not a folder" in long.stderr
    assert os.listdir(victim) == [] and live_processes(workspace.user) == []


def test_what_cannot_be_read_of_a_damaged_image_is_never_kept(workspace: Workspace, image_workdir: Path,
                                                              images: dict[str, Path]) -> None:
    work = image_workdir / "read-cache-damaged"
    rootfs = work / "rootfs"
    work.mkdir()
    subprocess.run(["unsquashfs", "-q", "-no-progress", "-d", str(rootfs), str(images["busybox"])], check=True,
                   stdout=subprocess.DEVNULL)
    (rootfs / "aaa-first").write_text(os.urandom(1 << 20).hex())  # sorted first: its blocks come first
    clean = work / "clean.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(clean), "-quiet", "-no-progress", "-noappend", "-all-root",
                    "-comp", "gzip"], check=True)
    image = str(damaged_copy(clean, work / "damaged.sqsh"))
    result = workspace.run("start", image, "sh", "-c", f"cat /aaa-first /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 5}")
    assert "I/O error" in result.stderr
    assert live_processes(workspace.user) == []
    (entry,) = entries(workspace.unpacked)
    assert (entry / "root" / "etc" / "passwd").is_file() and not (entry / "root" / "aaa-first").exists()
    assert not [name for name in os.listdir(workspace.unpacked) if name.endswith((".unpacking", ".failed"))]
    # The image is still served by the reader, with an I/O error where it is damaged.
    read = workspace.run("start", image, "sh", "-c", "cat /aaa-first > /dev/null; echo served")
    assert "served" in read.stdout and "I/O error" in read.stderr


def test_an_image_unsquashfs_cannot_read_is_not_tried_again(workspace: Workspace, image_workdir: Path,
                                                             images: dict[str, Path]) -> None:
    """An lz4 image as tar2sqfs writes one (and hydria did before it had mksquashfs write lz4):
    the reader serves it, unsquashfs 4.5 rejects it ("failed to read id table block")."""
    work = image_workdir / "read-cache-lz4"
    rootfs = work / "rootfs"
    work.mkdir()
    subprocess.run(["unsquashfs", "-q", "-no-progress", "-d", str(rootfs), str(images["busybox"])], check=True,
                   stdout=subprocess.DEVNULL)
    image = work / "tar2sqfs-lz4.sqsh"
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-cf", "-", "."], stdout=subprocess.PIPE)
    subprocess.run(["tar2sqfs", "-q", "-c", "lz4", str(image)], stdin=tar.stdout, check=True)
    assert tar.wait() == 0
    image.chmod(0o644)
    for _ in range(2):  # the second start finds the marker and leaves the image alone
        result = workspace.run("start", str(image), "sh", "-c", f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}")
        assert result.returncode == 0, result.stderr
        assert live_processes(workspace.user) == []
        failed = [name for name in os.listdir(workspace.unpacked) if name.endswith(".failed")]
        assert len(failed) == 1 and entries(workspace.unpacked) == []
        why = (workspace.unpacked / failed[0]).read_text()
        assert f"unsquashfs {image}" in why and "id table" in why, why


def test_the_size_limit_is_kept_by_removing_the_least_recently_started_image_not_in_use(
        tree_image: tuple[Path, Path], images: dict[str, Path], workspace: Workspace) -> None:  # noqa: F811
    image, _ = tree_image
    large = ["/data/large.bin"]  # 3 MiB
    # Too big for the limit: not kept, and the start is not the worse for it.
    result = workspace.run("start", str(image), "sh", "-c", f"cat {large[0]} > /dev/null; sleep {UNPACK_AFTER + 3}",
                           HYDRIA_READ_CACHE_SIZE="1M")
    assert result.returncode == 0, result.stderr
    assert entries(workspace.unpacked) == [] and live_processes(workspace.user) == []
    first = keep_behind(workspace, str(images["busybox"]), reads=["/bin/busybox"])
    # Room for what reading the large file keeps (measured in a folder of its own), not for both:
    # the busybox one must go first.
    probe = keep_behind(workspace, str(image), reads=large, HYDRIA_READ_CACHE_PATH=str(workspace.root / "probe"))
    need = int((probe / "size").read_text()) + int((first / "size").read_text()) // 2
    limit = {"HYDRIA_READ_CACHE_SIZE": str(need)}
    old = time.time() - 3600  # started an hour ago, out of the grace period
    using = workspace.popen("start", str(images["busybox"]), "sleep", "600")
    try:
        for _ in range(100):
            if any("hydria" not in line and "sleep 600" in line for line in live_processes(workspace.user, 0)):
                break
            time.sleep(0.1)
        os.utime(first, (old, old))
        refused = workspace.run("start", str(image), "sh", "-c",
                                f"cat {large[0]} > /dev/null; sleep {UNPACK_AFTER + 5}", **limit)
        assert refused.returncode == 0, refused.stderr
        assert entries(workspace.unpacked) == [first], "an image in use was removed"
    finally:
        using.terminate()
        using.communicate(timeout=30)
    os.utime(first, (old, old))
    second = keep_behind(workspace, str(image), reads=large, timeout=120, **limit)  # waits for the new entry
    assert entries(workspace.unpacked) == [second] and not first.exists()


def test_cache_list_and_prune_show_and_remove_unpacked_images(images: dict[str, Path],
                                                              workspace: Workspace) -> None:
    entry = keep_behind(workspace, str(images["busybox"]))
    size = int((entry / "size").read_text())
    listing = workspace.run("cache", "list", "--json")
    assert json.loads(listing.stdout)["unpacked"] == {"path": str(workspace.unpacked), "images": 1,
                                                      "bytes": size}
    old = time.time() - 3600
    os.utime(entry, (old, old))
    pruned = workspace.run("cache", "prune")
    assert pruned.returncode == 0, pruned.stderr
    assert entries(workspace.unpacked) == [] and not entry.exists()


def test_the_unpack_runs_as_the_user_at_idle_priority(images: dict[str, Path], workspace: Workspace,
                                                      test_user: User) -> None:
    path = tool_wrapper(workspace, "sleep 30")  # long enough to be seen at work
    process = workspace.popen("start", str(images["debian"]), "sh", "-c", "cat /etc/passwd > /dev/null; exec sleep 600",
                              PATH=path)
    try:
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline and not any("unsquashfs -no-progress" in line for line in seen):
            seen = run_as(test_user, ["ps", "-u", str(test_user.uid), "-o", "cls=,args="]).stdout.splitlines()
            time.sleep(0.1)
        unpacking = [line.split()[0] for line in seen if "unsquashfs -no-progress" in line]
        assert unpacking == ["IDL"], seen
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_disk_that_fills_during_the_unpack_loses_nothing(images: dict[str, Path], workspace: Workspace) -> None:
    small = workspace.root / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(small)], check=True)
    try:
        os.chown(small, workspace.user.uid, workspace.user.gid)
        # The real unsquashfs, after another program filled the disk (past the unpack's own check).
        path = tool_wrapper(workspace, f"fallocate -l $(($(df -B1 --output=avail {small} | tail -1) - 65536)) "
                                       f"{small}/other")
        env = {"HYDRIA_READ_CACHE_PATH": str(small / "unpacked"), "PATH": path}
        result = workspace.run("start", str(images["busybox"]), "sh", "-c",
                               f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 5}; cat /etc/os-release", **env)
        assert result.returncode == 0 and result.stdout.strip(), result.stderr
        assert live_processes(workspace.user) == []
        assert sorted(os.listdir(small / "unpacked")) == [n for n in os.listdir(small / "unpacked")
                                                          if n.endswith(".lock")]  # no tree, no marker
        (small / "other").unlink()  # there: the unpack had begun
        entry = keep_behind(workspace, str(images["busybox"]), HYDRIA_READ_CACHE_PATH=str(small / "unpacked"))
        assert (entry / "root" / "etc" / "passwd").is_file()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_disk_without_its_reserve_gets_no_unpack_and_doctor_says_so(images: dict[str, Path],
                                                                         workspace: Workspace) -> None:
    def read_cache_check() -> dict[str, str]:
        report = json.loads(workspace.run("doctor", "--json").stdout)
        return next(check for check in report["checks"] if check["name"] == "read cache")

    assert "free" not in read_cache_check()["detail"]
    space = os.statvfs(workspace.unpacked)
    keep = space.f_blocks * space.f_frsize // 20  # half the tenth an unpack leaves free
    filler = workspace.unpacked / "another-program's"
    subprocess.run(["fallocate", "-l", str(space.f_bavail * space.f_frsize - keep), str(filler)], check=True)
    check = read_cache_check()
    assert check["status"] == "warn", check
    reserve = format_size(free_and_reserve(str(workspace.unpacked))[1])
    assert f"free, less than the tenth ({reserve}) that an unpack leaves free: no image is unpacked" \
        in check["detail"], check
    assert check["fix"] == "make room on that disk, or set HYDRIA_READ_CACHE_PATH to a folder on a node-local " \
                           "disk with room"
    result = workspace.run("start", str(images["busybox"]), "sh", "-c",
                           f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 3}")
    assert result.returncode == 0, result.stderr
    assert live_processes(workspace.user) == [] and entries(workspace.unpacked) == []
    assert f"less than the tenth ({reserve}) that an unpack leaves free: images are not unpacked" in result.stderr
    assert "HYDRIA_READ_CACHE_PATH" in result.stderr
    again = workspace.run("start", str(images["busybox"]), "true")
    assert again.returncode == 0 and "less than the tenth" not in again.stderr, "said once"
    filler.unlink()
    assert keep_behind(workspace, str(images["busybox"])).is_dir()
    space = os.statvfs(workspace.unpacked)
    subprocess.run(["fallocate", "-l", str(space.f_bavail * space.f_frsize - keep), str(filler)], check=True)
    full_again = workspace.run("start", str(images["debian"]), "true")
    assert "less than the tenth" in full_again.stderr, "said again once the disk had room in between"


def test_images_built_alike_never_start_from_each_others_tree(images: dict[str, Path], workspace: Workspace,
                                                              image_workdir: Path) -> None:
    # Two images of the same size and the same superblock whose /etc/os-release differs, as
    # reproducible builds of two releases give: the second must never read the first's tree.
    work = image_workdir / "read-cache-alike"
    rootfs = work / "rootfs"
    work.mkdir()
    subprocess.run(["unsquashfs", "-q", "-no-progress", "-d", str(rootfs), str(images["busybox"])], check=True,
                   stdout=subprocess.DEVNULL)
    (rootfs / "etc" / "os-release").unlink()
    (rootfs / "etc" / "os-release").write_text("VERSION=20.04\n")
    first, second = work / "first.sqsh", work / "second.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(first), "-quiet", "-no-progress", "-noappend", "-all-root",
                    "-noI", "-noD", "-noF", "-mkfs-time", "0", "-all-time", "0"], check=True)
    blob = first.read_bytes()
    assert blob.count(b"VERSION=20.04") == 1
    second.write_bytes(blob.replace(b"VERSION=20.04", b"VERSION=22.04"))
    for image in (first, second):
        image.chmod(0o644)
    keep_behind(workspace, str(first), reads=["/etc/os-release"])
    result = workspace.run("start", str(second), "cat", "/etc/os-release")
    assert result.stdout == "VERSION=22.04\n", result.stderr
    assert workspace.run("start", str(first), "cat", "/etc/os-release").stdout == "VERSION=20.04\n"


CAPABILITY = bytes.fromhex("0100000200200000000000000000000000000000")  # cap_net_raw+ep, as setcap writes it


def busybox_with(images: dict[str, Path], image_workdir: Path, name: str, change: Callable[[Path], None]) -> Path:
    """The busybox test image with ``change`` made to its tree."""
    work = image_workdir / f"read-cache-{name}"
    rootfs = work / "rootfs"
    work.mkdir()
    subprocess.run(["unsquashfs", "-q", "-no-progress", "-d", str(rootfs), str(images["busybox"])], check=True,
                   stdout=subprocess.DEVNULL)
    change(rootfs)
    image = work / "image.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(image), "-quiet", "-no-progress", "-noappend", "-all-root"],
                   check=True)
    image.chmod(0o644)
    return image


def test_an_image_the_user_cannot_unpack_as_it_is_is_read_through_the_reader(
        workspace: Workspace, image_workdir: Path, images: dict[str, Path]) -> None:
    """A tree that would not show what the image does is never made (a file with a capability,
    which only root may set): the reader serves every start."""
    image = busybox_with(images, image_workdir, "capability",
                         lambda rootfs: os.setxattr(rootfs / "bin" / "busybox", "security.capability", CAPABILITY))
    for _ in range(2):  # the second start finds the marker and leaves the image alone
        result = workspace.run("start", str(image), "sh", "-c", f"cat /bin/busybox > /dev/null; sleep {UNPACK_AFTER + 3}")
        assert result.returncode == 0, result.stderr
        assert live_processes(workspace.user) == []
        names = os.listdir(workspace.unpacked)
        failed = [name for name in names if name.endswith(".failed")]
        assert len(failed) == 1 and entries(workspace.unpacked) == [], names
        assert not [name for name in names if name.endswith(".unpacking")], names
        assert "security.capability" in (workspace.unpacked / failed[0]).read_text()
    assert not lower_layer(workspace, str(image)).startswith(str(workspace.unpacked))


def test_a_name_with_a_line_break_stays_read_through_the_reader(
        workspace: Workspace, image_workdir: Path, images: dict[str, Path]) -> None:
    """unsquashfs's list of the files to unpack cannot name it; the other files read are kept."""
    odd = "a\n-rwsr-xr-x 0-0 1 2026-01-01 00:00 b"
    image = busybox_with(images, image_workdir, "line-break", lambda rootfs: (rootfs / "bin" / odd).write_text("odd\n"))
    entry = keep_behind(workspace, str(image))
    shown = workspace.run("start", str(image), "sh", "-c", f"cat '/bin/{odd}' > /dev/null; sleep {UNPACK_AFTER + 3}; "
                          f"cat '/bin/{odd}'")
    assert shown.stdout == "odd\n", shown.stderr
    assert (entry / "root" / "etc" / "passwd").is_file() and not (entry / "root" / "bin" / odd).exists()
    assert not [name for name in os.listdir(workspace.unpacked) if name.endswith((".failed", ".unpacking"))]


def test_a_folder_nobody_may_write_keeps_its_mode_in_the_tree(
        workspace: Workspace, image_workdir: Path, images: dict[str, Path]) -> None:
    """A folder of mode 0555 comes into the tree whole, with its mode; what later starts read in
    it stays read through the reader (the tree's folder is never made writable, not even for a
    moment)."""
    def read_only_folder(rootfs: Path) -> None:
        (rootfs / "ro").mkdir()
        for name in ("first", "later"):
            (rootfs / "ro" / name).write_text(f"{name}\n")
        (rootfs / "ro").chmod(0o555)

    image = busybox_with(images, image_workdir, "read-only", read_only_folder)
    entry = keep_behind(workspace, str(image), reads=["/ro/first"])
    assert (entry / "root" / "ro").stat().st_mode & 0o777 == 0o555
    shown = workspace.run("start", str(image), "sh", "-c",
                          f"cat /ro/later > /dev/null; sleep {UNPACK_AFTER + 3}; stat -c %a /ro; cat /ro/first /ro/later")
    assert shown.stdout == "555\nfirst\nlater\n", shown.stderr
    assert os.listdir(entry / "root" / "ro") == ["first"]
    assert not [name for name in os.listdir(workspace.unpacked) if name.endswith((".failed", ".unpacking"))]


def test_creates_of_an_image_that_cannot_be_linked_share_one_copy_and_one_tree(images: dict[str, Path],
                                                                               workspace: Workspace) -> None:
    """An image file of another user (protected_hardlinks) is copied once into the data path's
    .images, whatever number of containers are made of it: one copy on disk, one tree in the read
    cache (seven creates kept seven of each); the copy goes with the last container."""
    shared = workspace.root / "shared.sqsh"
    shutil.copy(images["busybox"], shared)  # root's file: the test user may read it, not link it
    shared.chmod(0o644)
    names = [f"c{number}" for number in range(3)]
    for name in names:
        assert workspace.run("create", "-n", name, str(shared)).returncode == 0
        started = workspace.run("start", name, "sh", "-c", f"cat /etc/passwd > /dev/null; sleep {UNPACK_AFTER + 2}")
        assert started.returncode == 0, started.stderr
    copies = list((workspace.root / "data" / ".images").iterdir())
    assert len(copies) == 1 and copies[0].stat().st_nlink == 1 + len(names)
    deadline = time.monotonic() + 60
    while not entries(workspace.unpacked) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(entries(workspace.unpacked)) == 1
    assert workspace.run("remove", "-f", *names).returncode == 0
    assert list((workspace.root / "data" / ".images").iterdir()) == []
