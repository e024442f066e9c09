"""The programs that serve an image file: hydria's reader (``hydria install-reader``) and squashfuse,
which a start falls back to. Each must show a container exactly the tree the image was made from,
owned by the user; a damaged image gives programs an I/O error, never a hang."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hydria.runtime.reader import reader_path
from testbed.users import live_processes
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

# The read cache off: a start that runs for a while would unpack its image, and the next start
# of it would read the tree instead of the reader (tests/integration/test_read_cache.py).
READ_CACHE_OFF = {"HYDRIA_READ_CACHE_SIZE": "0"}
READERS = {"fast": READ_CACHE_OFF, "squashfuse": {**READ_CACHE_OFF, "HYDRIA_FAST_READER": "n"}}

# Run inside the container (the Debian test image's python3): every entry under /data with its
# type and mode, owner, size, content digest or link target, and which names share an inode.
MANIFEST = r"""
import hashlib, json, os, stat, sys
root, out, inodes = sys.argv[1], {}, {}
for folder, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(folder, name)
        info = os.lstat(path)
        entry = [stat.filemode(info.st_mode), info.st_uid, info.st_gid]
        if stat.S_ISLNK(info.st_mode):
            entry.append(os.readlink(path))
        else:
            entry += [int(info.st_mtime), sorted([n, os.getxattr(path, n).hex()] for n in os.listxattr(path))]
        if stat.S_ISREG(info.st_mode):
            with open(path, "rb") as handle:
                entry += [info.st_size, hashlib.sha256(handle.read()).hexdigest()]
            inodes.setdefault((info.st_dev, info.st_ino), []).append(os.path.relpath(path, root))
            entry.append((info.st_dev, info.st_ino))
        out[os.path.relpath(path, root)] = entry
for entry in out.values():  # the file (device and inode number): the first of the names that share it
    if len(entry) == 8:
        entry[7] = min(inodes[entry[7]])
print(json.dumps(out, sort_keys=True))
"""


def make_tree(data: Path) -> None:
    """What images carry: a directory too big for one listing reply, deep and long names, links
    of both kinds, empty, private, executable and multi-block files, set-user-ID and -group-ID
    files and folders (Debian's su, passwd, /var/mail), a sticky folder, extended attributes."""
    wide = data / "wide"
    wide.mkdir(parents=True)
    for number in range(2500):
        (wide / f"module_{number:05d}_{'x' * (number % 90)}.py").write_text(f"VALUE = {number}\n" * (number % 7))
    deep = data
    for level in range(40):
        deep = deep / f"level{level}"
    deep.mkdir(parents=True)
    (deep / "bottom").write_text("deep\n")
    (data / "large.bin").write_bytes(os.urandom(3 << 20) + b"tail")
    (data / "text").write_text("hydria " * 100_000)
    (data / "empty").touch()
    private = data / "private"
    private.write_text("only the owner\n")
    private.chmod(0o600)
    tool = data / "tool"
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    os.symlink("text", data / "relative-link")
    os.symlink("/data/wide", data / "absolute-link")
    os.symlink("missing", data / "dangling-link")
    os.link(data / "text", data / "hardlink")
    locked = data / "locked"
    locked.mkdir()
    (locked / "inside").write_text("behind 0700\n")
    locked.chmod(0o700)
    for name, mode in (("setuid-tool", 0o4755), ("setgid-tool", 0o2711), ("setuid-unrunnable", 0o4600)):
        (data / name).write_text("#!/bin/sh\n")
        (data / name).chmod(mode)
    (data / "mail").mkdir()
    (data / "mail" / "inside").write_text("in a set-group-ID folder\n")
    (data / "mail").chmod(0o2775)
    (data / "scratch").mkdir()
    (data / "scratch").chmod(0o1777)
    os.setxattr(data / "text", "user.origin", b"hydria")
    os.setxattr(data / "mail", "user.kind", b"folder")


def host_manifest(data: Path, uid: int, gid: int) -> dict[str, list[object]]:
    """The manifest that the container should print, from the tree on the host."""
    import hashlib
    import stat

    out: dict[str, list[object]] = {}
    inodes: dict[int, list[str]] = {}
    for folder, dirs, files in os.walk(data):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            entry: list[object] = [stat.filemode(info.st_mode), uid, gid]
            if stat.S_ISLNK(info.st_mode):
                entry.append(os.readlink(path))
            else:
                entry += [int(info.st_mtime), sorted([n, os.getxattr(path, n).hex()] for n in os.listxattr(path))]
            if stat.S_ISREG(info.st_mode):
                entry += [info.st_size, hashlib.sha256(Path(path).read_bytes()).hexdigest(), info.st_ino]
                inodes.setdefault(info.st_ino, []).append(os.path.relpath(path, data))
            out[os.path.relpath(path, data)] = entry
    for entry in out.values():
        if len(entry) == 8:
            entry[7] = min(inodes[int(str(entry[7]))])
    return out


@pytest.fixture(scope="module")
def tree_image(images: dict[str, Path], image_workdir: Path) -> Iterator[tuple[Path, Path]]:
    """The Debian test image with the tree above in /data (owned by root, as images are), and
    the tree itself; zstd, as hydria's import writes images (the reader decompresses it itself)."""
    work = image_workdir / "reader"
    rootfs = work / "rootfs"
    work.mkdir()
    subprocess.run(["unsquashfs", "-q", "-no-progress", "-d", str(rootfs), str(images["debian"])], check=True,
                   stdout=subprocess.DEVNULL)
    make_tree(rootfs / "data")
    image = work / "tree.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(image), "-quiet", "-no-progress", "-noappend", "-all-root",
                    "-comp", "zstd"], check=True)
    image.chmod(0o644)
    yield image, rootfs / "data"
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("remap", [False, True], ids=["user", "root"])
def test_a_container_sees_the_tree_the_image_was_made_from(
        reader: str, remap: bool, tree_image: tuple[Path, Path], workspace: Workspace) -> None:
    image, data = tree_image
    options = ["--root"] if remap else []
    result = workspace.run("start", *options, str(image), "python3", "-c", MANIFEST, "/data", **READERS[reader])
    assert result.returncode == 0, result.stderr
    owner = (0, 0) if remap else (workspace.user.uid, workspace.user.gid)
    seen, expected = json.loads(result.stdout), host_manifest(data, *owner)
    if reader == "squashfuse":  # its high-level FUSE numbers every name apart: hard links look like copies
        for entry in (*seen.values(), *expected.values()):
            entry[7:] = []
    assert seen == expected


@pytest.mark.parametrize("reader", READERS)
def test_listings_lookups_and_writes_through_the_overlay(
        reader: str, tree_image: tuple[Path, Path], workspace: Workspace) -> None:
    image, data = tree_image
    script = ("ls /data/wide | wc -l; ls -l /data/wide/module_02499_* | cut -c1-10; cat /data/relative-link | wc -c; "
              "/data/tool; cat /data/private; test -e /data/nothing || echo absent; "
              "echo more >> /data/text && tail -c 5 /data/text; mv /data/wide/module_00000_.py /data/moved && "
              "ls /data/wide | wc -l")
    result = workspace.run("start", "--rw", str(image), "sh", "-c", script, **READERS[reader])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["2500", "-rw-r--r--", str((data / "text").stat().st_size), "tool",
                                         "only the owner", "absent", "more", "2499", ""]


def test_a_named_container_keeps_its_writes_with_either_reader(images: dict[str, Path],
                                                               workspace: Workspace) -> None:
    assert workspace.run("create", "-n", "kept", str(images["debian"])).returncode == 0
    for number, env in enumerate(READERS.values()):
        result = workspace.run("start", "--rw", "kept", "sh", "-c", f"echo {number} >> /etc/written; cat /etc/written",
                               **env)
        assert result.returncode == 0, result.stderr
    assert result.stdout == "0\n1\n"


def test_starts_use_the_reader_and_fall_back_to_squashfuse(images: dict[str, Path], workspace: Workspace) -> None:
    for env, daemon in ((READERS["fast"], "hydria-squashfuse"), (READERS["squashfuse"], "squashfuse")):
        process = workspace.popen("start", str(images["busybox"]), "sleep", "30", **env)
        try:
            for _ in range(100):
                daemons = [p for p in live_processes(workspace.user) if "sleep" not in p]
                if daemons:
                    break
                subprocess.run(["sleep", "0.1"], check=True)
            assert any(os.path.basename(line.split()[1]) == daemon for line in daemons), daemons
        finally:
            process.kill()
            process.wait(timeout=10)


def damaged_copy(image: Path, target: Path) -> Path:
    """``image`` with its first data blocks zeroed after their first two bytes (zlib's header,
    half of zstd's magic number): decompressing them fails, while the tables at the end stay
    readable."""
    blob = bytearray(image.read_bytes())
    start = 96 + 2  # the superblock, then the first block's first two bytes
    blob[start:start + 50_000] = bytes(50_000)
    target.write_bytes(bytes(blob))
    target.chmod(0o644)
    return target


@pytest.mark.parametrize(("reader", "compressor"), [("fast", "gzip"), ("fast", "zstd"), ("squashfuse", "gzip")])
def test_a_damaged_image_gives_an_io_error_not_a_hang(reader: str, compressor: str, workspace: Workspace,
                                                      image_workdir: Path) -> None:
    tree = image_workdir / f"damaged-{reader}-{compressor}"
    (tree / "bin").mkdir(parents=True)
    # Sorted first, so its blocks come first in the image: 2 MB of text that compresses to ~1 MB.
    (tree / "aaa-first").write_text(os.urandom(1 << 20).hex())
    shutil.copy("/bin/busybox", tree / "bin" / "busybox")
    (tree / "bin" / "sh").symlink_to("busybox")
    for folder in ("dev", "proc", "sys", "tmp", "etc"):
        (tree / folder).mkdir()
    clean = image_workdir / f"clean-{reader}-{compressor}.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(clean), "-quiet", "-no-progress", "-noappend", "-all-root",
                    "-comp", compressor], check=True)
    image = damaged_copy(clean, image_workdir / f"damaged-{reader}-{compressor}.sqsh")
    result = workspace.run("start", str(image), "/bin/busybox", "cat", "/aaa-first",
                           timeout=60, **READERS[reader])
    assert result.returncode != 0
    assert "I/O error" in result.stderr or "Input/output error" in result.stderr, result.stderr
    if reader == "fast":
        assert f"hydria-squashfuse: {image}: cannot read a file's data" in result.stderr
    # The rest of the image is still served.
    served = workspace.run("start", str(image), "/bin/busybox", "echo", "served", timeout=60, **READERS[reader])
    assert served.stdout == "served\n", served.stderr
    assert live_processes(workspace.user) == []


def test_install_reader_without_the_development_files_says_what_to_install(tmp_path: Path) -> None:
    hydria = str(Path(reader_path()).parents[2] / "bin" / "hydria")
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run([hydria, "install-reader"], capture_output=True, text=True,
                            env={"PATH": str(empty), "HOME": str(tmp_path)}, check=False)
    assert result.returncode != 0
    assert "pkg-config" in result.stderr and "libsquashfuse-dev" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.access(reader_path(), os.X_OK)  # the installed reader is untouched


def test_prune_never_takes_an_image_the_reader_serves(images: dict[str, Path], workspace: Workspace) -> None:
    from hydria.image.kept.prune import mounted_images

    process = workspace.popen("start", str(images["busybox"]), "sleep", "30", **READ_CACHE_OFF)
    try:
        for _ in range(100):
            if str(images["busybox"].resolve()) in mounted_images():
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert str(images["busybox"].resolve()) in mounted_images()
    finally:
        process.kill()
        process.wait(timeout=10)


def cpu_ticks(pid: int) -> int:
    """User and system time a process has used, in clock ticks (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_the_reader_sleeps_while_nobody_reads(images: dict[str, Path], workspace: Workspace) -> None:
    """After each request the reader keeps asking for the next for a millisecond where a CPU is
    to spare (docs/performance.md), never longer: a container that computes or waits costs its
    daemon no CPU."""
    script = "find / -xdev -type f -exec cat {} + > /dev/null; exec sleep 30"
    process = workspace.popen("start", str(images["debian"]), "sh", "-c", script, **READ_CACHE_OFF)
    try:
        daemon = sleeper = ""
        for _ in range(300):
            daemon = subprocess.run(["pgrep", "-u", str(workspace.user.uid), "-f", "hydria-squashfuse"],
                                    capture_output=True, text=True, check=False).stdout.strip()
            sleeper = subprocess.run(["pgrep", "-u", str(workspace.user.uid), "-x", "sleep"],
                                     capture_output=True, text=True, check=False).stdout.strip()
            if daemon and sleeper:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert daemon and sleeper, "the container did not read its image and sleep"
        pid = int(daemon.split()[0])
        busy = cpu_ticks(pid)
        subprocess.run(["sleep", "2"], check=True)
        assert cpu_ticks(pid) - busy <= 2  # 20 ms in 2 s at most: it sleeps in poll()
    finally:
        process.kill()
        process.wait(timeout=10)
    assert live_processes(workspace.user) == []
