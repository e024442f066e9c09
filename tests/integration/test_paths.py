"""Directories hydria makes for a user, as that user: private modes, and errors that say which
setting points where and how to fix it (the multi-user 'Permission denied' failure)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.users import User, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

ENSURE = """
import sys
from pathlib import Path
from hydria.errors import HydriaError
from hydria.paths import ensure_dir
try:
    print(ensure_dir(Path(sys.argv[1]), setting=sys.argv[2]))
except HydriaError as e:
    print(e.message, file=sys.stderr)
    print("hint:", e.hint, file=sys.stderr)
    sys.exit(1)
"""


def ensure_as(user: User, path: Path, setting: str = "HYDRIA_DATA_PATH"):
    return run_as(user, [sys.executable, "-c", ENSURE, str(path), setting])


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A world-writable sticky directory, like /tmp, that pytest cleans up."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"hydria-paths-{tmp_path.name}"
    path.mkdir(mode=0o1777)
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


def test_creates_private_directories_with_parents(test_user: User, shared_dir: Path) -> None:
    target = shared_dir / "a" / "b" / "data"
    result = ensure_as(test_user, target)
    assert result.returncode == 0, result.stderr
    for path in (shared_dir / "a", shared_dir / "a" / "b", target):
        info = path.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700
        assert info.st_uid == test_user.uid


def test_unwritable_location_names_path_user_setting_and_fix(test_user: User) -> None:
    result = ensure_as(test_user, Path("/var/lib/hydria-not-allowed/data"), "HYDRIA_CACHE_PATH")
    assert result.returncode == 1
    err = result.stderr
    assert "/var/lib/hydria-not-allowed/data (HYDRIA_CACHE_PATH) cannot create directory: Permission denied" in err
    assert f"user {test_user.name}, uid {test_user.uid}" in err
    assert "set HYDRIA_CACHE_PATH to a directory that hydria-test can write" in err
    assert not Path("/var/lib/hydria-not-allowed").exists()


def test_someone_elses_directory_is_not_trusted(test_user: User, other_user: User,
                                                shared_dir: Path) -> None:
    squatted = shared_dir / "hydria-runtime"
    assert ensure_as(other_user, squatted).returncode == 0
    result = ensure_as(test_user, squatted, "HYDRIA_RUNTIME_PATH")
    assert result.returncode == 1
    assert f"belongs to {other_user.name}, not to you" in result.stderr


def test_a_file_in_the_way_is_reported(test_user: User, shared_dir: Path) -> None:
    blocker = shared_dir / "blocker"
    blocker.write_text("")
    result = ensure_as(test_user, blocker)
    assert result.returncode == 1
    assert "exists but is not a directory" in result.stderr


def test_a_default_runtime_folder_another_user_made_first_is_passed_by(images: dict[str, Path],
                                                                      workspace: Workspace,
                                                                      other_workspace: Workspace,
                                                                      shared_dir: Path) -> None:
    """Without a login session the runtime folder's default is TMPDIR/hydria-runtime-UID, which
    anyone can make first in a shared /tmp: the start takes one in the user's cache folder then,
    instead of failing every start (a set HYDRIA_RUNTIME_PATH is still refused, as above)."""
    squatted = shared_dir / f"hydria-runtime-{workspace.user.uid}"
    assert run_as(other_workspace.user, ["mkdir", "-m", "777", str(squatted)]).returncode == 0
    result = workspace.run("start", str(images["busybox"]), "echo", "started", TMPDIR=str(shared_dir))
    assert result.returncode == 0 and result.stdout == "started\n", result.stderr
    info = workspace.run("info", TMPDIR=str(shared_dir)).stdout
    assert f"HYDRIA_RUNTIME_PATH={workspace.root}/xdg-cache/hydria/runtime" in info
    assert list(squatted.iterdir()) == []


def test_paths_an_overlay_cannot_be_mounted_from_are_refused_before_anything_is_made(
        images: dict[str, Path], workspace: Workspace) -> None:
    """',' separates the overlay's mount options and ':' its lower layers: a container named with
    ',' (or made in a folder whose path has one) was created, then failed every start with
    fuse-overlayfs's 'cannot retrieve path'. Now the create says so and makes nothing; so do starts
    from such a runtime folder; a read cache path the overlay cannot take is passed by, saying so."""
    image = str(images["busybox"])
    for character in ",\\":
        named = workspace.run("create", "--name", f"run{character}2", image)
        assert named.returncode == 1 and f"holds {character!r}" in named.stderr and "--name" in named.stderr, named.stderr
    odd = workspace.root / "odd,folder"
    odd.mkdir()
    os.chown(odd, workspace.user.uid, workspace.user.gid)
    in_odd = workspace.run("create", "--name", "run", image, HYDRIA_DATA_PATH=str(odd / "data"))
    assert in_odd.returncode == 1 and "holds ','" in in_odd.stderr, in_odd.stderr
    assert list(odd.iterdir()) == [] and not (workspace.root / "data" / "run,2").exists()
    unpacked = workspace.run("create", "--unpack", "--name", "run,3", image)  # a plain folder: no overlay
    assert unpacked.returncode == 0, unpacked.stderr
    assert workspace.run("start", "run,3", "echo", "started").stdout == "started\n"
    for character in ",:\\":
        runtime = workspace.root / f"run{character}time"
        started = workspace.run("start", image, "true", HYDRIA_RUNTIME_PATH=str(runtime))
        assert started.returncode == 1 and f"HYDRIA_RUNTIME_PATH {runtime} holds {character!r}" in started.stderr
        assert not runtime.exists()
    cache = workspace.root / "read:cache"
    passed = workspace.run("start", image, "echo", "started", HYDRIA_READ_CACHE_PATH=str(cache))
    assert passed.stdout == "started\n" and f"HYDRIA_READ_CACHE_PATH {cache} holds" in passed.stderr


@pytest.mark.parametrize("length", [200, 228, 240, 241, 255])
def test_every_name_that_fits_a_folder_is_created_started_and_removed(images: dict[str, Path], workspace: Workspace,
                                                                      length: int) -> None:
    """The folders a create and a removal make beside the container (``.NAME.creating...``,
    ``.NAME.removing...``) fit too: a name of 228-240 bytes could be created, never removed."""
    name = ("é" * length)[: length // 2] + "x" * (length % 2)  # 2-byte characters: bytes, not characters, count
    assert len(name.encode()) == length
    for args in (("create", "-n", name, str(images["busybox"])), ("start", name, "true"),
                 ("create", "-f", "-n", name, str(images["busybox"])), ("remove", "-f", name)):
        result = workspace.run(*args)
        assert result.returncode == 0, (args, result.stderr)
    assert list((workspace.root / "data").iterdir()) == []


def test_a_name_past_the_limit_gets_the_limit(images: dict[str, Path], workspace: Workspace) -> None:
    result = workspace.run("create", "-n", "x" * 256, str(images["busybox"]))
    assert result.returncode == 1 and "at most 255 bytes" in result.stderr and "creating" not in result.stderr
    assert not (workspace.root / "data").exists() or list((workspace.root / "data").iterdir()) == []


def test_export_of_a_long_name_asks_for_a_file_name(images: dict[str, Path], workspace: Workspace) -> None:
    name = "n" * 252
    assert workspace.run("create", "-n", name, str(images["busybox"])).returncode == 0
    refused = workspace.run("export", name)
    assert refused.returncode == 1 and "a file name holds at most 255 bytes" in refused.stderr
    assert "hydria export -o FILE NAME" in refused.stderr and list(workspace.out.glob(".*")) == []
    exported = workspace.run("export", "-o", "short.sqsh", name)
    assert exported.returncode == 0, exported.stderr
    assert (workspace.out / "short.sqsh").is_file()
