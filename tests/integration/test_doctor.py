"""``hydria doctor`` on this machine, as the unprivileged test user: the real checks pass, and
broken settings, missing tools and a broken image are reported with their fix and exit 1."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from testbed.publish import PublishedImage, push_as
from testbed.registry import Registry
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

REQUIRED = ["user namespaces", "kernel", "/dev/fuse", "squashfuse", "image reader", "tar2sqfs", "mksquashfs", "unsquashfs",
            "sqfs2tar", "HYDRIA_DATA_PATH", "HYDRIA_CACHE_PATH", "HYDRIA_RUNTIME_PATH", "HYDRIA_TEMP_PATH",
            "namespaces and mounts", "named containers", "container start"]


def statuses(output: str) -> dict[str, str]:
    report = json.loads(output)
    return {check["name"]: check["status"] for check in report["checks"]}


def test_doctor_passes_here(workspace: Workspace, images: dict[str, Path]) -> None:
    result = workspace.run("doctor", "--json", "--image", str(images["busybox"]))
    assert result.returncode == 0, result.stdout
    found = statuses(result.stdout)
    assert {name: found[name] for name in REQUIRED} == dict.fromkeys(REQUIRED, "ok")
    assert found["gpus"] == "skip" and found["infiniband"] == "skip"  # none on this machine
    table = workspace.run("doctor")
    assert table.returncode == 0 and "all checks passed" in table.stdout
    assert "container start        skip  no --image given" in table.stdout


def test_doctor_reports_failures_with_their_fix(workspace: Workspace, images: dict[str, Path]) -> None:
    tools = workspace.root / "bin"
    tools.mkdir()
    for program in ("mksquashfs", "unsquashfs", "tar2sqfs", "sqfs2tar", "sh", "hostname"):
        os.symlink(shutil.which(program) or program, tools / program)  # no squashfuse
    broken = workspace.out / "broken.sqsh"
    broken.write_bytes(b"hsqs" + bytes(100))
    result = workspace.run("doctor", "--image", str(broken), PATH=str(tools), HYDRIA_DATA_PATH="/root/nowhere",
                           HYDRIA_FAST_READER="n")
    assert result.returncode == 1
    assert "squashfuse             skip  not installed (optional)" in result.stdout
    assert ("image reader           FAIL  HYDRIA_FAST_READER is off and squashfuse is not installed: no container "
            "can start from an image") in result.stdout
    assert "fix: unset HYDRIA_FAST_READER, or install the package squashfuse" in result.stdout
    assert "HYDRIA_DATA_PATH       FAIL  /root/nowhere is not writable" in result.stdout
    assert "fix: set HYDRIA_DATA_PATH to a directory this user can write" in result.stdout
    assert "container start        FAIL" in result.stdout
    assert "namespaces and mounts  skip" in result.stdout
    assert "check(s) failed: what each names does not work here as things are" in result.stdout.splitlines()[-1]
    as_json = statuses(workspace.run("doctor", "--json", PATH=str(tools)).stdout)
    # hydria's reader serves without squashfuse
    assert as_json["image reader"] == "ok" and as_json["namespaces and mounts"] == "ok"
    assert as_json["squashfuse"] == "skip" and as_json["HYDRIA_DATA_PATH"] == "ok"


def test_a_temporary_path_not_made_yet_is_made_as_a_start_would(workspace: Workspace,
                                                                 images: dict[str, Path]) -> None:
    missing = workspace.out / "not" / "made"
    result = workspace.run("doctor", "--json", "--image", str(images["busybox"]), HYDRIA_TEMP_PATH=str(missing))
    assert result.returncode == 0, result.stdout
    found = statuses(result.stdout)
    assert {name: found[name] for name in REQUIRED} == dict.fromkeys(REQUIRED, "ok"), result.stdout
    assert missing.is_dir() and not any(missing.iterdir()), "made, and nothing of the checks left in it"


def test_doctor_says_how_to_get_the_fast_reader(workspace: Workspace) -> None:
    result = workspace.run("doctor", "--json", HYDRIA_FAST_READER="n")
    check = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "image reader")
    assert check["status"] == "warn" and "HYDRIA_FAST_READER is off" in check["detail"]
    assert check["fix"] == "unset HYDRIA_FAST_READER"


def test_doctor_usage_errors(workspace: Workspace) -> None:
    result = workspace.run("doctor", "-N2")
    assert result.returncode == 1
    result = workspace.run("doctor", "--", "-N2")
    assert result.returncode == 1 and "SRUN_ARGS are for --cluster" in result.stderr


def test_doctor_imports_and_starts_a_registry_image(workspace: Workspace, busybox: PublishedImage,
                                                    registry: Registry) -> None:
    """``--image`` takes what ``--container-image`` takes: a registry image is imported, then started."""
    uri = push_as(busybox, registry, "doctored", workspace.root)
    before = set(Path(tempfile.gettempdir()).glob("hydria-doctor-*"))
    for image in (uri, uri.removeprefix("docker://")):
        check = next(c for c in json.loads(workspace.run("doctor", "--json", "--image", image).stdout)["checks"]
                     if c["name"] == "container start")
        assert check["status"] == "ok" and check["detail"].startswith(f"hydria start {image} true: import "), check
    missing = f"docker://{registry.address}#hydria/no-such-image"
    check = next(c for c in json.loads(workspace.run("doctor", "--json", "--image", missing).stdout)["checks"]
                 if c["name"] == "container start")
    assert check["status"] == "fail" and check["detail"].startswith(f"hydria import {missing}: "), check
    assert check["fix"] == f"run it to see the whole error: hydria import -o /tmp/x.sqsh {missing}"
    assert set(Path(tempfile.gettempdir()).glob("hydria-doctor-*")) == before
