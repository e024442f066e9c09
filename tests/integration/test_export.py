"""``hydria export`` as the unprivileged test user: a container's writes go back into an image file."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from testbed.users import live_processes
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def ok(workspace: Workspace, *args: str) -> str:
    result = workspace.run(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("layout", ["mounted", "unpacked"])
def test_export_keeps_the_containers_writes(images: dict[str, Path], workspace: Workspace, layout: str) -> None:
    ok(workspace, "create", "-n", "work", *(("--unpack",) if layout == "unpacked" else ()), str(images["busybox"]))
    host = workspace.out / "host"
    host.mkdir()
    ok(workspace, "start", "--rw", "-m", f"{host}:/srv/host", "work", "sh", "-c",
       "echo kept > /new; rm /etc/os-release; mkdir -p /var/made; echo in > /var/made/f; chmod 0 /var/made")
    ok(workspace, "export", "work")
    exported = workspace.out / "work.sqsh"
    out = ok(workspace, "start", "--root", str(exported), "sh", "-c",
             "cat /new; test -e /etc/os-release || echo removed; cat /var/made/f; "
             "ls -A /dev | wc -l; "
             "test -e /srv/host || echo no-mount-point")
    lines = out.splitlines()
    assert lines[:3] == ["kept", "removed", "in"]  # read whatever its mode: the export maps the user to root
    assert int(lines[3]) > 0  # /dev is the host's at start; the image's own is empty
    assert lines[4] == "no-mount-point"  # the placeholder --mount made is left out, as enroot does
    listing = subprocess.run(["unsquashfs", "-lls", str(exported)], capture_output=True, text=True, check=True).stdout
    owners = {line.split()[1] for line in listing.splitlines() if "squashfs-root" in line}
    assert owners == {"root/root"}  # as an import: the user's files are root's


def test_export_refuses_to_overwrite_without_force(images: dict[str, Path], workspace: Workspace) -> None:
    ok(workspace, "create", "-n", "c", str(images["busybox"]))
    target = workspace.out / "image.sqsh"
    target.write_text("precious\n")
    result = workspace.run("export", "-o", str(target), "c")
    assert result.returncode != 0 and f"File already exists: {target}" in result.stderr
    assert target.read_text() == "precious\n"
    ok(workspace, "export", "-f", "-o", str(target), "c")
    assert target.read_bytes()[:4] == b"hsqs"


@pytest.mark.parametrize(("args", "message"), [
    (("missing",), "No such container: missing"),
    (("-o", "nodir/x.sqsh", "c"), "No such file or directory"),
    (("-o", "some/", "c"), "Invalid argument: some/"),
    (("a/b",), "Invalid argument: a/b"),
    (("-o", "/root/x.sqsh", "c"), "Permission denied: /root\n[INFO] hint: choose an --output in a directory you can"),
    (("-o", "/x.sqsh", "c"), "Permission denied: /\n[INFO] hint: choose an --output in a directory you can write"),
])
def test_export_errors_leave_nothing(images: dict[str, Path], workspace: Workspace, args: tuple[str, ...],
                                     message: str) -> None:
    ok(workspace, "create", "-n", "c", str(images["busybox"]))
    result = workspace.run("export", *args)
    assert result.returncode != 0 and message in result.stderr
    assert sorted(p.name for p in workspace.out.iterdir()) == []


def test_export_reports_a_failing_squash(images: dict[str, Path], workspace: Workspace) -> None:
    ok(workspace, "create", "-n", "c", str(images["busybox"]))
    result = workspace.run("export", "c", HYDRIA_SQUASH_OPTIONS="-comp nosuch")
    assert result.returncode != 0 and "cannot write c.sqsh" in result.stderr
    assert sorted(p.name for p in workspace.out.iterdir()) == []


@pytest.mark.parametrize("command", ["export", "bundle"])
def test_sigterm_while_writing_leaves_nothing(command: str, images: dict[str, Path], workspace: Workspace) -> None:
    """scancel or kill in the middle of an export or a bundle: the command ends as on Ctrl-C, with
    its half-written file and the tools writing it (mksquashfs, sqfs2tar, the compressor) gone."""
    ok(workspace, "create", "-n", "c", str(images["debian"]))
    args = ["export", "-o", "out.sqsh", "c"] if command == "export" else ["bundle", "-o", "out.run",
                                                                          str(images["debian"])]
    process = workspace.popen(*args)
    deadline = time.monotonic() + 30
    while not list(workspace.out.glob(".out.*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "it ended before it was writing: nothing was tested"
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert process.returncode == 143, err  # 128 + SIGTERM
    assert "Traceback" not in err
    assert list(workspace.out.iterdir()) == []
    assert live_processes(workspace.user, wait=5) == []
