"""``hydria bundle`` and the bundles it makes, run as the unprivileged test user with the host's
python3: the bundle carries hydria's runtime, so nothing of the installed hydria is used to run it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def ok(workspace: Workspace, *args: str, **env: str) -> str:
    result = workspace.run(*args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_bundle(workspace: Workspace, bundle: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the bundle with a clean environment: no HYDRIA_* settings pointing into the workspace."""
    return run_as(workspace.user, [str(bundle), *args], cwd=workspace.out,
                  env={"TMPDIR": str(workspace.root / "tmp"), **env})


def give_to_user(workspace: Workspace, path: Path) -> None:
    """Hand what the test made as root in the workspace to its user."""
    subprocess.run(["chown", "-R", f"{workspace.user.uid}:{workspace.user.gid}", str(path)], check=True)


@pytest.fixture
def bundle(images: dict[str, Path], workspace: Workspace) -> Iterator[Path]:
    (workspace.root / "tmp").mkdir(mode=0o700)
    give_to_user(workspace, workspace.root / "tmp")
    ok(workspace, "bundle", "-c", "-d", "a test bundle", "-o", "bb.run", str(images["busybox"]))
    yield workspace.out / "bb.run"
    assert list((workspace.root / "tmp").iterdir()) == []  # every run removed its extracted tree


def test_bundle_starts_its_image_and_passes_the_exit_status(bundle: Path, workspace: Workspace) -> None:
    result = run_bundle(workspace, bundle, "cat", "/etc/os-release")
    assert result.returncode == 0, result.stderr
    assert "hydria busybox test image" in result.stdout
    assert run_bundle(workspace, bundle, "sh", "-c", "exit 7").returncode == 7
    assert run_bundle(workspace, bundle, "id", "-u").stdout.strip() == str(workspace.user.uid)
    assert run_bundle(workspace, bundle, "-r", "id", "-u").stdout.strip() == "0"


def test_bundle_start_options(bundle: Path, workspace: Workspace) -> None:
    host = workspace.out / "shared"
    host.mkdir()
    (host / "file").write_text("from the host\n")
    rc = workspace.out / "rc"
    rc.write_text('echo "rc: $*"; exec "$@"\n')
    conf = workspace.out / "conf.sh"
    conf.write_text("environ() {\n  echo FROM_CONF=yes\n}\n")
    give_to_user(workspace, workspace.out)
    result = run_bundle(workspace, bundle, "-e", "GREETING=hi", "-m", f"{host}:/mnt/shared:none:x-create=dir,bind,ro",
                        "--rc", str(rc), "-c", str(conf), "--",
                        "sh", "-c", "echo $GREETING $FROM_CONF; cat /mnt/shared/file; touch /mnt/shared/x || echo ro")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["rc: sh -c echo $GREETING $FROM_CONF; cat /mnt/shared/file; touch /mnt/shared/x || echo ro",
                                          "hi yes", "from the host", "ro"]
    assert run_bundle(workspace, bundle, "touch", "/new").returncode != 0  # read-only without --rw
    assert run_bundle(workspace, bundle, "-w", "touch", "/new").returncode == 0


def test_bundle_keep_and_extract(bundle: Path, images: dict[str, Path], workspace: Workspace) -> None:
    result = run_bundle(workspace, bundle, "-k", "-w", "sh", "-c", "echo kept > /kept")
    assert result.returncode == 0, result.stderr
    target = workspace.out / "bb"
    assert (target / "kept").read_text() == "kept\n"
    assert (target / "etc" / "os-release").is_file() and (target / ".hydria" / "lib" / "hydria").is_dir()
    assert not (workspace.out / ".bb").exists()  # the runtime directory goes when the run ends
    again = run_bundle(workspace, bundle, "-x")
    assert again.returncode == 1 and f"File already exists: {target}" in again.stderr
    assert (target / "kept").is_file()  # untouched
    other = workspace.out / "other.run"
    ok(workspace, "bundle", "-t", "extracted-here", "-o", str(other), str(images["busybox"]))
    result = run_bundle(workspace, other, "--extract")
    assert result.returncode == 0 and result.stdout == ""
    assert (workspace.out / "extracted-here" / "bin" / "busybox").is_file()


def test_bundle_info_usage_and_checksum(bundle: Path, images: dict[str, Path], workspace: Workspace) -> None:
    info = run_bundle(workspace, bundle, "--info")
    assert info.returncode == 0
    lines = dict(line.split(": ", 1) for line in info.stdout.splitlines())
    assert lines["Description"] == "a test bundle" and lines["Compression"] == "zstd"
    assert lines["Target directory"] == "bb" and lines["Uncompressed size"].endswith(" KB")
    assert len(lines["Checksum"].split()) == 2
    usage = run_bundle(workspace, bundle, "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: bb.run") and "a test bundle" in usage.stdout
    wrong = run_bundle(workspace, bundle, "--no-such-option", "true")  # enroot's bundles exit 0 here
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.startswith("[ERROR] Unknown option: --no-such-option (the bundle's options come before")
    assert "Usage: bb.run" in wrong.stderr
    missing = run_bundle(workspace, bundle, "-e")
    assert missing.returncode == 1 and missing.stderr.startswith("[ERROR] -e needs a value")
    plain = workspace.out / "plain.run"
    ok(workspace, "bundle", "-o", str(plain), str(images["busybox"]))
    assert "Checksum" not in run_bundle(workspace, plain, "-i").stdout
    data = bytearray(bundle.read_bytes())
    data[-100] ^= 0xFF  # inside the root filesystem's archive
    bundle.write_bytes(bytes(data))
    broken = run_bundle(workspace, bundle, "true")
    assert broken.returncode == 1 and "Checksum validation failed" in broken.stderr


def test_bundle_all_carries_settings_and_configuration(images: dict[str, Path], workspace: Workspace) -> None:
    (workspace.root / "tmp").mkdir()
    config = workspace.root / "config" / "environ.d"
    config.mkdir(parents=True)
    (config / "site.env").write_text("SITE=from-user-config\n")
    hooks = workspace.root / "etc" / "hooks.d"
    hooks.mkdir(parents=True)
    (hooks / "10-mark.sh").write_text('#!/bin/sh\necho "HOOKED=yes" >> "$ENROOT_ENVIRON"\n')
    (hooks / "10-mark.sh").chmod(0o755)
    give_to_user(workspace, workspace.root)
    ok(workspace, "bundle", "-o", "plain.run", str(images["busybox"]))
    ok(workspace, "bundle", "-a", "-o", "all.run", str(images["busybox"]), HYDRIA_MOUNT_HOME="y")
    bound = 'grep -q " $HOME " /proc/self/mountinfo'  # not only there: a start makes one where the image lacks it
    show = ["sh", "-c", f"echo ${{SITE:-none}} ${{HOOKED:-none}}; {bound} && echo home || echo no-home"]
    plain = run_bundle(workspace, workspace.out / "plain.run", *show)
    assert plain.stdout.split() == ["none", "yes", "no-home"], plain.stderr  # system hooks only
    everything = run_bundle(workspace, workspace.out / "all.run", *show)
    assert everything.stdout.split() == ["from-user-config", "yes", "home"], everything.stderr


def test_bundle_of_an_image_compressed_otherwise(workspace: Workspace) -> None:
    tree = workspace.root / "tree"
    (tree / "bin").mkdir(parents=True)
    subprocess.run(["cp", "/bin/busybox", str(tree / "bin" / "busybox")], check=True)
    (tree / "bin" / "sh").symlink_to("busybox")
    (tree / "etc").mkdir()
    (tree / "etc" / "rc").write_text('exec "$@"\n')
    (workspace.root / "tmp").mkdir()
    give_to_user(workspace, workspace.root)
    for options, compression in ((["-comp", "gzip"], "gzip"), (["-noD", "-noF"], "none")):
        image = workspace.out / f"{compression}.sqsh"
        subprocess.run(["mksquashfs", str(tree), str(image), "-quiet", "-noappend", *options], check=True)
        ok(workspace, "bundle", str(image))
        bundle = workspace.out / f"{compression}.run"
        assert f"Compression: {compression}" in run_bundle(workspace, bundle, "-i").stdout
        result = run_bundle(workspace, bundle, "/bin/sh", "-c", "echo started")
        assert result.stdout == "started\n", result.stderr


@pytest.mark.parametrize(("args", "message", "env"), [
    (("missing.sqsh",), "No such file or directory: /tmp/hydria-ws-", {}),  # the absolute path, as enroot names it
    (("not-an-image",), "Invalid image format: not-an-image", {}),
    (("-o", "nodir/x.run", "IMAGE"), "No such file or directory", {}),
    (("-o", "existing.run", "IMAGE"), "File already exists", {}),
    (("-d", "", "IMAGE"), "--desc takes a non-empty value", {}),
    (("-o", "x.run", "IMAGE"), "SOURCE_DATE_EPOCH='yesterday' is not a time", {"SOURCE_DATE_EPOCH": "yesterday"}),
    (("-o", "x.run", "IMAGE"), "SOURCE_DATE_EPOCH='\u00b2' is not a time", {"SOURCE_DATE_EPOCH": "\u00b2"}),
])
def test_bundle_errors_leave_nothing(images: dict[str, Path], workspace: Workspace, args: tuple[str, ...],
                                     message: str, env: dict[str, str]) -> None:
    (workspace.out / "not-an-image").write_text("text\n")
    (workspace.out / "existing.run").write_text("precious\n")
    give_to_user(workspace, workspace.out)
    result = workspace.run("bundle", *(str(images["busybox"]) if a == "IMAGE" else a for a in args), **env)
    assert result.returncode == 1 and message in result.stderr
    assert sorted(p.name for p in workspace.out.iterdir()) == ["existing.run", "not-an-image"]
    assert (workspace.out / "existing.run").read_text() == "precious\n"


def test_bundle_checks_free_space_first(bundle: Path, workspace: Workspace) -> None:
    small = workspace.root / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=512k,uid={workspace.user.uid}", "tmpfs", str(small)],
                   check=True)
    try:
        result = run_bundle(workspace, bundle, "true", TMPDIR=str(small))
        assert result.returncode == 1 and f"Not enough space left in {small}" in result.stderr
        assert "KB needed" in result.stderr
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_bundle_takes_cdi_devices(bundle: Path, workspace: Workspace) -> None:
    """A bundle's runtime reads the host's CDI specs (a JSON one: the host's Python may lack PyYAML)."""
    specs = workspace.out / "cdi"
    specs.mkdir()
    (specs / "x.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/x",
                                              "devices": [{"name": "a", "containerEdits": {"env": ["X_DEVICE=a"]}}]}))
    give_to_user(workspace, workspace.out)
    result = run_bundle(workspace, bundle, "--device", "example.com/x=a", "--", "sh", "-c", "echo $X_DEVICE",
                        HYDRIA_CDI_SPEC_DIRS=str(specs))
    assert result.returncode == 0 and result.stdout == "a\n", result.stderr
    missing = run_bundle(workspace, bundle, "--device=example.com/x=b", "true", HYDRIA_CDI_SPEC_DIRS=str(specs))
    assert missing.returncode == 1 and "no such CDI device: example.com/x=b" in missing.stderr
