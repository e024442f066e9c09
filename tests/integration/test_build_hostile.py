"""``hydria build`` against hostile input, by class: an ``ADD`` URL that never ends or leads
nowhere, an archive whose entries reach outside, sources outside the build context (links, ``..``,
bind mounts, ``.dockerignore``), a step that fills the disk. Each gets a clear error or stays
inside the image; nothing of the host is read or written, nothing half-made is left behind."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from testbed.publish import PublishedImage
from testbed.workspace import Workspace
from tests.integration.test_build import base_of, build, built, make_context

pytestmark = pytest.mark.integration


class _HostileServer(BaseHTTPRequestHandler):
    """/loop: redirects to itself; /file: to file:///etc/passwd; /nowhere: to a URL that is none;
    /trickle: a byte every half second; /endless: zeros without end, as fast as they go."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        where = {"/loop": self.path, "/file": "file:///etc/passwd", "/nowhere": "http://[::::]/x"}
        head = "/" + self.path.split("/")[1]
        if head in where:
            self.send_response(302)
            self.send_header("Location", where[head])
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(1 << 20 if head == "/endless" else 600):
                self.wfile.write(bytes(1 << 20) if head == "/endless" else b"x")
                self.wfile.flush()
                if head == "/trickle":
                    time.sleep(0.5)
        except OSError:
            pass  # the client gave up


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _HostileServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def refused(workspace: Workspace, context: Path, message: str, **env: str) -> None:
    result = build(workspace, "-o", "x.sqsh", str(context), **env)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (workspace.out / "x.sqsh").exists()


@pytest.mark.parametrize(("path", "message"), [
    ("/loop/x.bin", "cannot download: Exceeded maximum allowed redirects"),
    ("/file/x.bin", "cannot download: Request URL has an unsupported protocol 'file://'"),
    ("/nowhere/x.bin", "cannot download: Invalid URL in location header"),
    ("/trickle/x.bin", "the download took longer than HYDRIA_TRANSFER_TIMEOUT (3 s)"),
])
def test_an_add_url_that_never_ends_or_leads_nowhere_stops_with_a_clear_error(
        debian: PublishedImage, workspace: Workspace, server: str, path: str, message: str) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nADD {server}{path} /opt/\n"})
    started = time.monotonic()
    refused(workspace, context, message, HYDRIA_TRANSFER_TIMEOUT="3")
    assert time.monotonic() - started < 60


def test_an_add_url_that_is_no_url_is_an_error(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nADD http://[::::]/x.bin /opt/\n"})
    refused(workspace, context, "Dockerfile:2: ADD: http://[::::]/x.bin: not a URL: ")


def archive(members: list[tarfile.TarInfo]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"planted\n") if member.isreg() else None)
    return data.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(b"planted\n") if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(("members", "message"), [
    ([member("../../../../../../tmp/escaped")], "archive a.tar: entry '../../../../../../tmp/escaped' would land outside"),
    ([member("hard", tarfile.LNKTYPE, "/etc/shadow")],
     "entry 'hard' is a hard link to '/etc/shadow', which is no file the archive unpacked before it"),
    ([member("hard", tarfile.LNKTYPE, "../../etc/passwd")], "entry '../../etc/passwd' would land outside"),
])
def test_an_archive_that_reaches_outside_is_refused(debian: PublishedImage, workspace: Workspace,
                                                    members: list[tarfile.TarInfo], message: str) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nADD a.tar /opt/\n",
                                       "a.tar": archive(members)})
    refused(workspace, context, message)
    assert not Path("/tmp/escaped").exists()


def test_an_archive_writing_through_its_own_link_stays_in_the_image(debian: PublishedImage,
                                                                   workspace: Workspace) -> None:
    name = f"hydria-planted-{uuid.uuid4().hex}"
    members = [member("link", tarfile.SYMTYPE, "/tmp"), member(f"link/{name}"), member("node", tarfile.CHRTYPE)]
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nADD a.tar /opt/\n",
                                       "a.tar": archive(members)})
    built(workspace, "-o", "x.sqsh", str(context))
    assert not Path("/tmp", name).exists()
    listing = subprocess.run(["unsquashfs", "-lln", str(workspace.out / "x.sqsh")], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert any(line.endswith(f" squashfs-root/tmp/{name}") for line in listing)
    assert any(line.endswith(" squashfs-root/opt/link -> /tmp") for line in listing)
    assert not any("squashfs-root/opt/node" in line for line in listing)  # a device node is not made


@pytest.mark.parametrize(("dockerfile", "message"), [
    ("COPY shadow /x\n", "shadow: no such file or directory in the build context"),
    ("COPY ../../../../etc/hostname /x\n", "../../../../etc/hostname: no such file or directory in the build context"),
    ("RUN --mount=type=bind,source=../../../../etc,target=/mnt ls /mnt\n", "../../../../etc is not in the build context"),
    ("RUN --mount=type=bind,source=shadow,target=/mnt cat /mnt\n", "shadow is not in the build context"),
])
def test_nothing_outside_the_context_is_read(debian: PublishedImage, workspace: Workspace, dockerfile: str,
                                             message: str) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n{dockerfile}"})
    os.symlink("/etc/shadow", context / "shadow")  # a link out of the context is read inside it
    refused(workspace, context, message)


def test_a_dockerignore_cannot_bring_in_what_is_outside(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nCOPY . /ctx/\n",
                                       ".dockerignore": "../\n!../../etc\n!/etc/hostname\n", "a": "x"})
    built(workspace, "-o", "x.sqsh", str(context))
    listed = workspace.run("start", str(workspace.out / "x.sqsh"), "ls", "-A", "/ctx")
    assert listed.stdout.split() == [".dockerignore", "Dockerfile", "a"], listed.stderr


@pytest.fixture
def small_cache(workspace: Workspace) -> Iterator[Path]:
    """The workspace's cache on a file system of 160 MiB, which a step can fill."""
    workspace.cache.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=160m,mode=0700,uid={workspace.user.uid}", "tmpfs",
                    str(workspace.cache)], check=True)
    yield workspace.cache
    subprocess.run(["umount", "-l", str(workspace.cache)], check=True)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


@pytest.mark.parametrize(("step", "message"), [
    ("RUN dd if=/dev/zero of=/filled bs=1M status=none", "RUN dd if=/dev/zero of=/filled bs=1M status=none: exited with status 1"),
    ("ADD {server}/endless/x.bin /opt/", "cannot write the download: No space left on device"),
])
def test_a_step_that_fills_the_disk_fails_and_gives_the_room_back(debian: PublishedImage, workspace: Workspace,
                                                                  small_cache: Path, server: str, step: str,
                                                                  message: str) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN true\n{step.format(server=server)}\n"})
    build(workspace, "-o", "x.sqsh", "--target", "0", str(context))  # the base image and the first step, cached
    before = free_bytes(small_cache)
    refused(workspace, context, message)
    assert free_bytes(small_cache) >= before - (1 << 20)  # the failed step's folder is gone
    assert not list((small_cache / "build" / "work").iterdir())
