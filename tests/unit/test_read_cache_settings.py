"""The read cache's settings (container/read_cache.py): where it is on, and where it is off."""

from __future__ import annotations

import pytest

from hydria.config import Context, parse_conf, resolve
from hydria.container.read_cache import ReadCache, configured, entry_key, placement_problem

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


def test_an_entry_is_named_by_the_whole_identity() -> None:
    size, superblock = "1175552", "6873717" + "0" * 185
    assert entry_key(f"{size} {superblock}") == f"{size}-{superblock}"
    assert len(entry_key(f"{size} {superblock}")) + len(".unpacking") < 255
