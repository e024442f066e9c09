"""The read cache's settings (container/read_cache.py): where it is on, where it is off, and how
an image's tree is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hydria.config import Context, parse_conf, resolve
from hydria.container.read_cache import ReadCache, configured, image_key, placement_problem, room

CONTEXT = Context(uid=1001, user="ada", home="/home/ada", hostname="node07", nproc=4,
                  package_dir="/opt/hydria", runtime_default="/run/user/1001/hydria")


def cache_of(text: str) -> ReadCache | None:
    return configured(resolve([parse_conf(text, "/etc/hydria/hydria.conf")], {"HOME": "/home/ada"}, CONTEXT))


def test_on_by_default_in_a_folder_of_the_users_own() -> None:
    assert cache_of("") == ReadCache("/var/tmp/hydria-unpacked-1001", 40 << 30)
    assert cache_of("HYDRIA_READ_CACHE_PATH /scratch/$USER/unpacked\nHYDRIA_READ_CACHE_SIZE 2T\n") == \
        ReadCache("/scratch/ada/unpacked", 2 << 40)


@pytest.mark.parametrize("text", ["HYDRIA_READ_CACHE_SIZE 0", "HYDRIA_READ_CACHE_PATH /tmp/a,b",
                                  "HYDRIA_READ_CACHE_PATH /tmp/a:b"])
def test_off_with_no_room_or_a_folder_an_overlay_cannot_name(text: str) -> None:
    assert cache_of(text) is None


def test_a_folder_in_memory_is_named_as_such() -> None:
    assert placement_problem("/dev/shm/not-there-yet/unpacked") == "is in memory (tmpfs)"


def figures(blocks: int, free: int, available: int) -> os.statvfs_result:
    """A file system of 4 KiB blocks, as os.statvfs gives its figures."""
    return os.statvfs_result((4096, 4096, blocks, free, available, 0, 0, 0, 0, 255))


@pytest.mark.parametrize(("blocks", "free", "available", "expected"), [
    (1000, 500, 500, (500 * 4096, 100 * 4096)),  # nothing kept for root (tmpfs, xfs)
    (1000, 500, 450, (450 * 4096, 95 * 4096)),  # ext4's 5% for root
    (1000, 800, 200, (200 * 4096, 40 * 4096)),  # 600 blocks kept for root: a tenth of the 400 users may fill
])
def test_an_unpack_leaves_a_tenth_of_what_users_may_fill(blocks: int, free: int, available: int,
                                                          expected: tuple[int, int]) -> None:
    assert room(figures(blocks, free, available)) == expected


def test_images_built_alike_never_share_a_tree(tmp_path: Path) -> None:
    # Reproducible builds (tar2sqfs writes no creation time) give images of the same size and the
    # same superblock whose files differ: "Ubuntu 20.04" and "Ubuntu 22.04" in /etc/os-release.
    superblock = b"hsqs" + bytes(92)
    first, second = tmp_path / "a.sqsh", tmp_path / "b.sqsh"
    first.write_bytes(superblock + b"Ubuntu 20.04")
    second.write_bytes(superblock + b"Ubuntu 22.04")
    assert image_key(str(first)) != image_key(str(second))
    assert image_key(str(first)) == image_key(str(first))
    assert len(image_key(str(first))) + len(".unpacking") < 255
    before = image_key(str(first))
    with open(first, "r+b") as handle:  # rewritten in place, as `cp other.sqsh a.sqsh` does
        handle.seek(len(superblock))
        handle.write(b"Ubuntu 24.04")
    info = first.stat()
    os.utime(first, ns=(info.st_atime_ns, info.st_mtime_ns + 1))
    assert image_key(str(first)) != before
