"""``hydria import`` as the unprivileged test user, against the real registry and real tools.

The correctness proof: the tree inside the squashfs equals what an independent pipeline (skopeo
copy + umoci unpack) makes of the same image, with one documented normalisation: hydria gives the
owner read permission (and rwx on directories), as enroot's import does, so the image is usable.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from hydria.image.squash.flatten import usable_mode
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.tree import Node, snapshot
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration
RUNTIME_FILES = {"etc/rc", "etc/rc.local", "etc/environment", "etc/fstab"}


def unsquash(image: Path, dest: Path) -> tuple[dict[str, Node], set[frozenset[str]]]:
    subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-d", str(dest), str(image)],
                   check=True, capture_output=True)
    return snapshot(dest)


def reference_tree(image: PublishedImage, tmp: Path) -> tuple[dict[str, Node], set[frozenset[str]]]:
    """skopeo copy from the registry, umoci unpack (as root, so ownership is kept)."""
    layout = tmp / "skopeo-layout"
    subprocess.run(["skopeo", "copy", "--src-tls-verify=false",
                    f"docker://{image.registry}/{image.repository}:{image.tag}", f"oci:{layout}:{image.tag}"],
                   check=True, capture_output=True)
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{image.tag}", str(tmp / "bundle")],
                   check=True, capture_output=True)
    nodes, groups = snapshot(tmp / "bundle" / "rootfs")
    normalised = {path: node._replace(mode=usable_mode(node.mode, node.kind == "d"))
                  for path, node in nodes.items()}
    return normalised, groups


def import_ok(workspace: Workspace, *args: str) -> Path:
    result = workspace.run("import", *args)
    assert result.returncode == 0, result.stderr
    images = sorted(workspace.out.glob("*.sqsh"))
    assert len(images) == 1, images
    return images[0]


@pytest.mark.parametrize("name", ["busybox", "debian"])
def test_registry_import_matches_umoci(name: str, request: pytest.FixtureRequest,
                                       workspace: Workspace, tmp_path: Path) -> None:
    image: PublishedImage = request.getfixturevalue(name)
    output = import_ok(workspace, image.docker_uri)
    assert output.name == f"hydria+{name}+{image.tag}.sqsh"
    assert output.stat().st_uid == workspace.user.uid
    ours, our_links = unsquash(output, tmp_path / "ours")
    theirs, their_links = reference_tree(image, tmp_path)
    assert RUNTIME_FILES <= set(ours)
    for path in RUNTIME_FILES:  # generated from the image config; they replace the image's own
        ours.pop(path)
        theirs.pop(path, None)
    assert ours.keys() == theirs.keys()
    differences = {p: (ours[p], theirs[p]) for p in ours if ours[p] != theirs[p]}
    assert not differences
    assert our_links == their_links


def test_debian_image_contents(debian: PublishedImage, workspace: Workspace, tmp_path: Path) -> None:
    nodes, links = unsquash(import_ok(workspace, debian.docker_uri), tmp_path / "root")
    root = tmp_path / "root"
    assert "etc/issue.net" not in nodes and "usr/share/doc/bash" not in nodes
    assert sorted(p for p in nodes if p.startswith("etc/apt/apt.conf.d/")) == ["etc/apt/apt.conf.d/99hydria-test"]
    assert frozenset({"opt/hydria-test/data.txt", "opt/hydria-test/data-hardlink.txt"}) in links
    assert nodes["opt/hydria-test/owned-by-1234"].uid == 1234
    assert nodes["opt/hydria-test/absolute-link"] == Node("l", 0o777, 0, 0, "/etc/os-release")
    rc = (root / "etc/rc").read_text()
    assert rc.startswith(f"# hydria-provenance: docker://{debian.registry}#hydria/debian:bookworm\n")
    assert "cd /opt/hydria-test && unset OLDPWD || exit 1" in rc
    assert 'exec /usr/local/bin/hydria-entrypoint "$@"' in rc
    assert "exec /usr/local/bin/hydria-entrypoint python3 -c" in rc
    assert "# org.opencontainers.image.title hydria test debian" in rc
    environment = (root / "etc/environment").read_text().splitlines()
    assert "GREETING=hello world" in environment and "HYDRIA_TEST_IMAGE=debian" in environment
    assert (root / "etc/fstab").read_text() == "${HYDRIA_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"


@pytest.mark.parametrize("form", ["oci_layout", "oci_archive", "docker_archive"])
def test_local_forms_give_the_registry_tree(form: str, debian: PublishedImage, workspace: Workspace,
                                            tmp_path: Path) -> None:
    scheme = {"oci_layout": "oci", "oci_archive": "oci-archive", "docker_archive": "docker-archive"}[form]
    output = import_ok(workspace, "-o", "local.sqsh", f"{scheme}://{getattr(debian, form)}")
    local, local_links = unsquash(output, tmp_path / "local")
    output.unlink()
    remote, remote_links = unsquash(import_ok(workspace, debian.docker_uri), tmp_path / "remote")
    for tree in (local, remote):
        del tree["etc/rc"]  # the provenance line names the source
    assert local == remote and local_links == remote_links


def test_an_oci_layout_image_is_named_after_the_name_the_layout_gives_it(debian: PublishedImage,
                                                                        workspace: Workspace) -> None:
    output = import_ok(workspace, f"oci://{debian.oci_layout}")  # its index names it by the tag alone
    assert output.name == f"{debian.oci_layout.name}+{debian.tag}.sqsh"


def test_warm_import_uses_the_cache(busybox: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    before = sum(registry.blob_fetches(busybox.repository).values())
    first = workspace.run("import", "-o", "a.sqsh", busybox.docker_uri)
    assert first.returncode == 0, first.stderr
    second = workspace.run("import", "-o", "b.sqsh", busybox.docker_uri)
    assert second.returncode == 0, second.stderr
    assert sum(registry.blob_fetches(busybox.repository).values()) == before + 2  # config + layer, once
    assert (workspace.out / "a.sqsh").read_bytes() == (workspace.out / "b.sqsh").read_bytes()
    blobs = list((workspace.cache / "blobs" / "sha256").iterdir())
    assert {b.name for b in blobs} >= {layer.blob.digest[7:] for layer in busybox.image.layers}
    assert all(b.stat().st_mode & 0o777 == 0o644 for b in blobs)
    assert (workspace.cache.stat().st_mode & 0o777) == 0o700


def test_quiet_prints_nothing(busybox: PublishedImage, workspace: Workspace) -> None:
    result = workspace.run("import", "--quiet", busybox.docker_uri)
    assert result.returncode == 0 and result.stderr == "" and result.stdout == ""


def test_rc_and_json_config_round_trip(busybox: PublishedImage, workspace: Workspace, tmp_path: Path) -> None:
    nodes, _ = unsquash(import_ok(workspace, busybox.docker_uri), tmp_path / "r")
    rc = (tmp_path / "r" / "etc/rc").read_text()
    assert rc.rstrip().endswith("exec /bin/sh\nfi")
    assert (tmp_path / "r" / "etc/environment").read_text() == "PATH=/bin\n"
    assert nodes["bin/sh"] == Node("l", 0o777, 0, 0, "busybox")


@pytest.mark.parametrize(("options", "superblock"), [
    # enroot's default: lzo, data blocks stored raw (mksquashfs repacks tar2sqfs's image)
    ("-comp lzo -noD -exit-on-error", ["Compression lzo", "Data is uncompressed", "Inodes are compressed"]),
    ("-noI -noD -noF -noX", ["Compression gzip", "Data is uncompressed", "Inodes are uncompressed",
                             "Fragments are uncompressed"]),
    ("-b 256K", ["Compression gzip", "Block size 262144", "Data is compressed"]),  # mksquashfs's default compressor
    # tar2sqfs's lz4 images are ones that unsquashfs rejects ("failed to read id table block")
    ("-comp lz4", ["Compression lz4", "Data is compressed"]),
    # an lzo algorithm tar2sqfs does not write ("creating compressor: unknown or not supported")
    ("-comp lzo -Xalgorithm lzo1x_1", ["Compression lzo", "Data is compressed", "\talgorithm lzo1x_1"]),
])
def test_enroot_squash_options_mean_what_they_say(options: str, superblock: list[str], debian: PublishedImage,
                                                 workspace: Workspace, tmp_path: Path) -> None:
    """Whoever writes it (tar2sqfs, or mksquashfs repacking tar2sqfs's image), the image has the
    compression asked for and the tree of the image, owners, modes and links included."""
    result = workspace.run("import", debian.docker_uri, HYDRIA_SQUASH_OPTIONS=options)
    assert result.returncode == 0 and "WARN" not in result.stderr, result.stderr
    [image] = list(workspace.out.iterdir())  # nothing else left behind
    found = subprocess.run(["unsquashfs", "-s", str(image)], check=True, capture_output=True, text=True).stdout
    assert all(line in found.splitlines() for line in superblock), found
    ours, our_links = unsquash(image, tmp_path / "ours")
    theirs, their_links = reference_tree(debian, tmp_path)
    for path in RUNTIME_FILES:
        ours.pop(path)
        theirs.pop(path, None)
    assert {p: (ours.get(p), theirs.get(p)) for p in ours.keys() | theirs.keys() if ours.get(p) != theirs.get(p)} == {}
    assert our_links == their_links
    started = workspace.run("start", str(image), "cat", "/etc/debian_version")
    assert started.returncode == 0 and started.stdout.strip(), started.stderr


def test_two_cold_imports_of_one_manifest_by_two_users_are_the_same_bytes(debian: PublishedImage, workspace: Workspace,
                                                                        other_workspace: Workspace) -> None:
    """Reproducible images: another user, another cache, another time, the same image file, so
    that a copy (sbcast, a staged store) can be checked against the digest of the first."""
    first = import_ok(workspace, debian.docker_uri)
    time.sleep(1.1)  # a second later: no time of the import is in the image
    second = import_ok(other_workspace, "-o", first.name, debian.docker_uri)
    assert first.read_bytes() == second.read_bytes()
