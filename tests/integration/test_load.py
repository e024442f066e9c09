"""``hydria load``: import + create in one step, as the unprivileged test user."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.publish import PublishedImage
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def data(workspace: Workspace) -> Path:
    return Path(workspace.env()["HYDRIA_DATA_PATH"])


def test_load_makes_a_container(busybox: PublishedImage, workspace: Workspace) -> None:
    result = workspace.run("load", busybox.docker_uri)
    assert result.returncode == 0, result.stderr
    names = workspace.run("list").stdout.split()
    assert len(names) == 1 and names[0].endswith("busybox+latest")  # the import's default name
    out = workspace.run("start", names[0], "head", "-1", "/etc/os-release").stdout
    assert out == 'PRETTY_NAME="hydria busybox test image"\n'
    assert sorted(p.name for p in data(workspace).iterdir()) == names  # no staging file left
    assert f"Container {names[0]} created in {data(workspace)}" in result.stderr
    assert ".loading." not in result.stderr  # no internal file name reported as the image written


def test_load_name_force_and_errors(busybox: PublishedImage, workspace: Workspace) -> None:
    assert workspace.run("load", "-n", "mine", busybox.docker_uri).returncode == 0
    again = workspace.run("load", "-n", "mine", busybox.docker_uri)
    assert again.returncode == 1 and f"File already exists: {data(workspace) / 'mine'}" in again.stderr
    assert workspace.run("load", "-f", "-n", "mine", busybox.docker_uri).returncode == 0
    wrong = workspace.run("load", "-n", "other", f"oci-archive://{workspace.out}/x.tar")
    assert wrong.returncode == 1 and "Invalid argument: oci-archive://" in wrong.stderr
    missing = workspace.run("load", "-n", "other", busybox.docker_uri.rsplit(":", 1)[0] + ":nosuchtag")
    assert missing.returncode == 1
    assert sorted(p.name for p in data(workspace).iterdir()) == ["mine"]  # nothing half-made
