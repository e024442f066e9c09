"""The test bed itself: the registry serves the images, independent tools (skopeo, umoci) read
every form we write, and the Debian image holds the cases import must handle."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest

from testbed.publish import PublishedImage
from testbed.recipes import get_image
from testbed.users import User, run_as

pytestmark = pytest.mark.integration
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json,"
                  "application/vnd.docker.distribution.manifest.v2+json")


def skopeo_inspect(reference: str) -> dict:
    result = subprocess.run(["skopeo", "inspect", "--tls-verify=false", reference],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["busybox", "debian"])
def test_registry_serves_manifest_and_blobs(name: str, request: pytest.FixtureRequest) -> None:
    image: PublishedImage = request.getfixturevalue(name)
    base = f"http://{image.registry}/v2/{image.repository}"
    manifest = httpx.get(f"{base}/manifests/{image.tag}", headers={"Accept": MANIFEST_TYPES})
    assert manifest.status_code == 200
    assert manifest.headers["Docker-Content-Digest"] == image.digest
    assert "sha256:" + hashlib.sha256(manifest.content).hexdigest() == image.digest
    document = manifest.json()
    assert len(document["layers"]) == len(image.image.layers)
    for descriptor in [document["config"], *document["layers"]]:
        blob = httpx.get(f"{base}/blobs/{descriptor['digest']}", follow_redirects=True)
        assert blob.status_code == 200
        assert "sha256:" + hashlib.sha256(blob.content).hexdigest() == descriptor["digest"]


def test_unknown_tag_is_404(busybox: PublishedImage) -> None:
    response = httpx.get(f"http://{busybox.registry}/v2/{busybox.repository}/manifests/nope",
                         headers={"Accept": MANIFEST_TYPES})
    assert response.status_code == 404


def test_skopeo_reads_every_form(debian: PublishedImage) -> None:
    forms = {
        "registry": f"docker://{debian.registry}/{debian.repository}:{debian.tag}",
        "oci layout": f"oci:{debian.oci_layout}:{debian.tag}",
        "oci archive": f"oci-archive:{debian.oci_archive}:{debian.tag}",
        "docker archive": f"docker-archive:{debian.docker_archive}",
    }
    for form, reference in forms.items():
        info = skopeo_inspect(reference)
        assert len(info["Layers"]) == 3, form
        assert "HYDRIA_TEST_IMAGE=debian" in info["Env"], form
        assert info["Labels"]["org.opencontainers.image.title"] == "hydria test debian", form


def test_debian_config_has_the_docker_fields(debian: PublishedImage) -> None:
    config = debian.image.config
    assert config["WorkingDir"] == "/opt/hydria-test"
    assert config["Entrypoint"] == ["/usr/local/bin/hydria-entrypoint"]
    assert config["Cmd"][0] == "python3"
    assert "GREETING=hello world" in config["Env"]
    assert config["Volumes"] == {"/data": {}}


def test_debian_layers_hold_whiteouts_opaque_dirs_and_links(debian: PublishedImage) -> None:
    with tarfile.open(debian.image.layers[2].tar_path) as tar:
        members = {m.name: m for m in tar}
    assert "etc/.wh.issue.net" in members
    assert "usr/share/doc/.wh.bash" in members
    assert "etc/apt/apt.conf.d/.wh..wh..opq" in members
    assert members["opt/hydria-test/data-hardlink.txt"].islnk()
    assert members["opt/hydria-test/relative-link"].issym()
    assert "opt/hydria-test/file with spaces.txt" in members
    assert members["opt/hydria-test/owned-by-1234"].uid == 1234
    with tarfile.open(debian.image.layers[0].tar_path) as tar:
        base = tar.getmembers()
    names = [m.name for m in base]
    assert "usr/bin/dpkg" in names and not any(n.startswith("usr/bin/python3") for n in names)
    assert not any(m.ischr() or m.isblk() for m in base), "Docker images carry no device nodes"


def test_umoci_unpacks_the_layout_as_docker_would(debian: PublishedImage, tmp_path: Path) -> None:
    """An independent implementation applies our layers: whiteouts delete, opaque dirs hide."""
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{debian.oci_layout}:{debian.tag}", str(bundle)],
                   check=True, capture_output=True)
    rootfs = bundle / "rootfs"
    assert (rootfs / "usr/bin/python3").exists()
    assert not (rootfs / "etc/issue.net").exists()
    assert not (rootfs / "usr/share/doc/bash").exists()
    assert not (rootfs / "usr/lib/python3.11/pydoc_data").exists()
    assert (rootfs / "usr/lib/python3.11/json").is_dir()
    assert sorted(os.listdir(rootfs / "etc/apt/apt.conf.d")) == ["99hydria-test"]
    data = rootfs / "opt/hydria-test"
    assert (data / "data.txt").stat().st_ino == (data / "data-hardlink.txt").stat().st_ino
    assert os.readlink(data / "absolute-link") == "/etc/os-release"
    assert (rootfs / "etc/motd").read_text() == "hydria test image\n"
    assert (data / "owned-by-1234").stat().st_uid == 1234
    assert 'VERSION_CODENAME=bookworm' in (rootfs / "etc/os-release").read_text()


def test_recipe_cache_is_reused_and_not_required(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = get_image("busybox", tmp_path, cache)
    entries = list(cache.iterdir())
    second = get_image("busybox", tmp_path, cache)
    assert [e.name for e in cache.iterdir()] == [e.name for e in entries]
    assert first.layers[0].blob.digest == second.layers[0].blob.digest
    uncached = tmp_path / "uncached"
    uncached.mkdir()
    third = get_image("busybox", uncached, cache=None)
    assert third.layers[0].blob.digest == first.layers[0].blob.digest


def test_test_user_is_unprivileged_and_can_make_user_namespaces(test_user: User) -> None:
    assert test_user.uid != 0
    ids = run_as(test_user, ["sh", "-c", "id -u; id -G"], check=True).stdout.split()
    assert ids == [str(test_user.uid), str(test_user.gid)]
    inside = run_as(test_user, ["unshare", "--user", "--map-root-user", "--mount", "id", "-u"])
    assert inside.returncode == 0, f"no unprivileged user namespaces: {inside.stderr}"
    assert inside.stdout.strip() == "0"


def test_test_user_does_not_inherit_root_environment(test_user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOT_ONLY_SECRET", "x")
    env = run_as(test_user, ["env"], check=True).stdout
    assert "ROOT_ONLY_SECRET" not in env and f"HOME={test_user.home}" in env


def test_fuse_device_is_usable_by_users() -> None:
    assert os.stat("/dev/fuse").st_mode & 0o666 == 0o666


def test_users_run_hydria_from_the_checkout(test_user: User, hydria_bin: str) -> None:
    result = run_as(test_user, [hydria_bin, "version"])
    assert result.returncode == 0, result.stderr
