"""The seccomp filter (enroot's and pyxis's): in the one-uid user namespace, calls that change
owners or ids succeed without doing anything, so that package managers work under ``--root``;
and apt fetches as root there (enroot's aptfix hook). As the unprivileged test user."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def ok(workspace: Workspace, *args: str) -> str:
    result = workspace.run(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("root", [False, True])
def test_chown_succeeds_without_changing_the_owner(images: dict[str, Path], workspace: Workspace,
                                                  root: bool) -> None:
    out = ok(workspace, "start", *(["--root"] if root else []), str(images["busybox"]), "sh", "-c",
             "grep '^Seccomp:' /proc/self/status; touch /tmp/f; chown 123:456 /tmp/f && echo chown-ok; "
             "stat -c %u /tmp/f")
    owner = "0" if root else str(workspace.user.uid)
    assert out.split() == ["Seccomp:", "2", "chown-ok", owner]


def test_a_package_installs_under_root(images: dict[str, Path], workspace: Workspace) -> None:
    package = workspace.root / "pkg"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "opt" / "probe").mkdir(parents=True)
    (package / "opt" / "probe" / "data").write_text("payload\n")
    (package / "DEBIAN" / "control").write_text("Package: hydria-probe\nVersion: 1.0\nArchitecture: all\n"
                                                "Maintainer: test <test@example.invalid>\nDescription: probe\n")
    postinst = package / "DEBIAN" / "postinst"
    postinst.write_text("#!/bin/sh\nset -e\nchown nobody:nogroup /opt/probe/data\n")  # fails without the filter
    postinst.chmod(0o755)
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(package), str(workspace.out / "probe.deb")],
                   check=True, capture_output=True)
    (workspace.out / "probe.deb").chmod(0o644)
    mount = f"{workspace.out}:/debs:none:x-create=dir,bind,ro"
    out = ok(workspace, "start", "--root", "--rw", "-m", mount, str(images["debian"]), "sh", "-c",
             "apt-config dump APT::Sandbox::User; apt-get install -y -q /debs/probe.deb >/dev/null 2>&1; "
             "dpkg-query -W -f '${Status}\\n' hydria-probe; cat /opt/probe/data")
    assert out.splitlines() == ['APT::Sandbox::User "root";', "install ok installed", "payload"]
    plain = ok(workspace, "start", str(images["debian"]), "apt-config", "dump", "APT::Sandbox::User")
    assert plain == 'APT::Sandbox::User "_apt";\n'  # without --root apt keeps its sandbox
