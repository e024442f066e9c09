"""The layouts an administrator may give a cache that several users of a node share (the cache
directory made by root, as on a cluster): the documented one works for every user and ``doctor``
accepts it; every other one either works for every user too or is refused, by the import and by
``doctor``, with the same words and the fix, and the refused import leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.publish import PublishedImage, push_as
from testbed.registry import Registry
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def uri(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> str:
    return push_as(busybox, registry, "layouts", image_workdir)


@pytest.fixture
def cache() -> Iterator[Path]:
    """A directory root makes for a cache (in a folder every user can reach); each test gives it a mode."""
    parent = Path(tempfile.mkdtemp(prefix="hydria-layout-"))
    parent.chmod(0o755)
    path = parent / "cache"
    path.mkdir()
    yield path
    subprocess.run(["rm", "-rf", str(parent)], check=True)


def make(path: Path, mode: int) -> None:
    path.mkdir(exist_ok=True)
    path.chmod(mode)


def doctor_cache_check(workspace: Workspace, cache: Path) -> dict[str, str]:
    result = workspace.run("doctor", "--json", HYDRIA_CACHE_PATH=str(cache))
    return next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "HYDRIA_CACHE_PATH")


def imports(workspace: Workspace, uri: str, cache: Path, output: str) -> subprocess.CompletedProcess[str]:
    return workspace.run("import", "-o", output, uri, HYDRIA_CACHE_PATH=str(cache))


@pytest.mark.parametrize("folders_by_admin", [True, False], ids=["folders by the admin", "folders by a first import"])
def test_the_documented_shared_cache_works_for_every_user(folders_by_admin: bool, uri: str, cache: Path,
                                                          workspace: Workspace, other_workspace: Workspace) -> None:
    cache.chmod(0o1777)
    if folders_by_admin:  # install -d -m 1777 ..., as docs/import.md shows
        for sub in ("blobs", "blobs/sha256", "locks"):
            make(cache / sub, 0o1777)
    for user in (workspace, other_workspace):
        result = imports(user, uri, cache, "mine.sqsh")
        assert result.returncode == 0, result.stderr
        assert "Not using" not in result.stderr
        check = doctor_cache_check(user, cache)
        assert check["status"] == "ok", check
        assert check["detail"].startswith(f"{cache} (shared: mode 1777, owner root)")
    assert (cache / "blobs" / "sha256").stat().st_mode & 0o7777 == 0o1777


@pytest.mark.parametrize(("mode", "problem", "fix"), [
    (0o777, "is writable by other users but not sticky (mode 0777)", "chmod +t"),
    (0o755, "belongs to root (mode 0755), and other users cannot write it", "chmod 1777"),
    (0o1770, "is shared by the group root, and you are not in it (mode 1770)", "add you to that group"),
], ids=["not sticky", "root's own", "another group's"])
def test_a_layout_that_would_lock_users_out_is_refused_with_the_fix(mode: int, problem: str, fix: str, uri: str,
                                                                    cache: Path, workspace: Workspace) -> None:
    cache.chmod(mode)
    result = imports(workspace, uri, cache, "refused.sqsh")
    assert result.returncode == 1
    assert f"[ERROR] {cache} (HYDRIA_CACHE_PATH" in result.stderr and problem in result.stderr, result.stderr
    assert fix in result.stderr and "Traceback" not in result.stderr
    assert list(cache.iterdir()) == [] and not (workspace.out / "refused.sqsh").exists()
    check = doctor_cache_check(workspace, cache)
    assert check["status"] == "fail" and problem in check["detail"] and fix in check["fix"], check


def test_a_folder_another_user_made_private_does_not_lock_the_others_out(uri: str, cache: Path, workspace: Workspace,
                                                                         other_workspace: Workspace) -> None:
    """The first user (an older tool, by hand, or on purpose) made ``blobs`` 0700 in a sticky cache."""
    cache.chmod(0o1777)
    made = run_as(other_workspace.user, ["mkdir", "-m", "0700", str(cache / "blobs")])
    assert made.returncode == 0, made.stderr
    result = imports(workspace, uri, cache, "mine.sqsh")
    assert result.returncode == 0, result.stderr
    assert f"Not using the shared cache {cache}: you cannot add to {cache / 'blobs'}" in result.stderr
    check = doctor_cache_check(workspace, cache)
    assert check["status"] == "warn" and "chmod 1777" in check["fix"], check
    assert doctor_cache_check(other_workspace, cache)["status"] == "ok"
