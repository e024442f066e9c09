"""Image URIs: enroot's grammar and standard Docker syntax, normalisation, default output names."""

from __future__ import annotations

import pytest

from hydria.image.ref.reference import (
    DOCKER_HUB,
    EngineImage,
    InvalidReference,
    LocalImage,
    RegistryImage,
    parse,
)

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("uri", "expected"), [
    ("docker://ubuntu", RegistryImage(DOCKER_HUB, "library/ubuntu")),
    ("docker://ubuntu:24.04", RegistryImage(DOCKER_HUB, "library/ubuntu", "24.04")),
    (f"docker://ubuntu@{D}", RegistryImage(DOCKER_HUB, "library/ubuntu", None, D)),
    (f"docker://ubuntu:24.04@{D}", RegistryImage(DOCKER_HUB, "library/ubuntu", "24.04", D)),
    ("docker://nvidia/cuda:12.9.1-devel-ubuntu24.04",
     RegistryImage(DOCKER_HUB, "nvidia/cuda", "12.9.1-devel-ubuntu24.04")),
    ("docker://nvcr.io/nvidia/pytorch:24.01-py3", RegistryImage("nvcr.io", "nvidia/pytorch", "24.01-py3")),
    ("docker://nvcr.io#nvidia/pytorch:24.01-py3", RegistryImage("nvcr.io", "nvidia/pytorch", "24.01-py3")),
    ("docker://127.0.0.1:5000#hydria/busybox", RegistryImage("127.0.0.1:5000", "hydria/busybox")),
    ("docker://127.0.0.1:5000/hydria/busybox:1", RegistryImage("127.0.0.1:5000", "hydria/busybox", "1")),
    ("docker://localhost/img", RegistryImage("localhost", "img")),
    ("docker://docker.io/ubuntu", RegistryImage(DOCKER_HUB, "library/ubuntu")),
    ("docker://index.docker.io#ubuntu:22.04", RegistryImage(DOCKER_HUB, "library/ubuntu", "22.04")),
    ("docker://registry-1.docker.io/library/debian", RegistryImage(DOCKER_HUB, "library/debian")),
    ("docker://$oauthtoken@nvcr.io#nvidia/cuda:12",
     RegistryImage("nvcr.io", "nvidia/cuda", "12", user="$oauthtoken")),
    ("docker://ada@ghcr.io/org/tool:v1", RegistryImage("ghcr.io", "org/tool", "v1", user="ada")),
    ("docker://ada@example.com@registry.example.com#team/app",
     RegistryImage("registry.example.com", "team/app", user="ada@example.com")),
    (f"docker://ada@reg.io#a/b@{D}", RegistryImage("reg.io", "a/b", None, D, "ada")),
])
def test_docker_forms(uri: str, expected: RegistryImage) -> None:
    assert parse(uri) == expected


def test_digest_wins_over_tag() -> None:
    assert parse(f"docker://reg.io/a/b:v1@{D}").reference == D
    assert parse("docker://reg.io/a/b").reference == "latest"


@pytest.mark.parametrize(("uri", "name"), [
    ("docker://ubuntu:24.04", "ubuntu+24.04.sqsh"),
    ("docker://ubuntu", "ubuntu.sqsh"),
    ("docker://nvidia/cuda:12.9.1-devel-ubuntu24.04", "nvidia+cuda+12.9.1-devel-ubuntu24.04.sqsh"),
    ("docker://nvcr.io#nvidia/pytorch:24.01-py3", "nvidia+pytorch+24.01-py3.sqsh"),
    ("docker://quay.io/library/x:1", "library+x+1.sqsh"),
    (f"docker://img@{D}", f"img+{D}.sqsh"),
    ("dockerd://ubuntu:22.04", "ubuntu+22.04.sqsh"),
    ("podman://quay.io/org/app:1", "quay.io+org+app+1.sqsh"),
    ("oci:///srv/images/app", "app.sqsh"),
    ("oci:///srv/images/app:v2", "app+v2.sqsh"),
    ("oci-archive:///tmp/app.tar", "app.sqsh"),
    ("docker-archive:///tmp/saved.tar", "saved.sqsh"),
])
def test_default_output_names(uri: str, name: str) -> None:
    assert parse(uri).default_output() == name


@pytest.mark.parametrize(("named", "name"), [
    ("docker.io/library/ubuntu:24.04", "ubuntu+24.04.sqsh"),  # docker save, podman save --format oci-archive
    ("localhost/train:1", "train+1.sqsh"),  # podman's own images
    ("registry.example.com:5000/lab/train:1", "lab+train+1.sqsh"),
    ("quay.io/library/x:1", "library+x+1.sqsh"),
    (f"ubuntu@{D}", "ubuntu.sqsh"),
    ("24.04", "app+24.04.sqsh"),  # skopeo copy ... oci:app:24.04: a bare tag
    ("../../etc/x:1", "app.sqsh"),  # no file name: the folder's
    ("a b:1", "app.sqsh"),
    (".hidden", "app.sqsh"),
    (None, "app.sqsh"),
])
def test_an_oci_layout_image_is_named_after_the_name_the_layout_gives_it(named: str | None, name: str) -> None:
    layout, chosen = parse("oci:///srv/images/app"), parse("oci:///srv/images/app:v2")
    assert isinstance(layout, LocalImage) and isinstance(chosen, LocalImage)
    assert layout.default_output(named) == name
    assert chosen.default_output(named) == "app+v2.sqsh"  # the image the URI chose: named as it


def test_canonical_uri_for_provenance() -> None:
    assert parse("docker://ubuntu").uri == f"docker://{DOCKER_HUB}#library/ubuntu:latest"
    assert parse(f"docker://r.io/a:1@{D}").uri == f"docker://r.io#a@{D}"


def test_engines_and_local_paths() -> None:
    assert parse("dockerd://ubuntu:22.04") == EngineImage("docker", "ubuntu:22.04")
    assert parse("podman://localhost/x:1") == EngineImage("podman", "localhost/x:1")
    assert parse("oci:///a/b") == LocalImage("oci", "/a/b")
    assert parse("oci:///a/b:v1") == LocalImage("oci", "/a/b", "v1")
    assert parse("oci:///a/b:v1", path_exists=True) == LocalImage("oci", "/a/b:v1")
    assert parse("oci-archive://rel/x.tar:latest") == LocalImage("oci-archive", "rel/x.tar", "latest")
    assert parse("docker-archive:///a/b:c.tar") == LocalImage("docker-archive", "/a/b:c.tar")


@pytest.mark.parametrize(("uri", "message"), [
    ("ubuntu", "Invalid argument: ubuntu"),
    ("http://x/y", "Invalid argument: http://x/y"),
    ("shub://x", "Invalid argument: shub://x"),
    ("docker://", "Invalid image reference: docker://"),
    ("docker://Ubuntu", "Invalid image reference"),
    ("docker://reg.io#Team/App", "Invalid image reference"),
    ("docker://ubuntu:", "Invalid image reference"),
    ("docker://ubuntu@sha256:abc", "Invalid image reference"),
    ("docker://a b", "Invalid image reference"),
    ("docker://reg.io#", "Invalid image reference"),
    ("docker://reg.io/a//b", "Invalid image reference"),
    ("dockerd://", "Invalid image reference"),
    ("podman://a b", "Invalid image reference"),
    ("oci://", "Invalid image reference"),
])
def test_invalid(uri: str, message: str) -> None:
    with pytest.raises(InvalidReference, match=message) as caught:
        parse(uri)
    assert caught.value.hint, "every refused reference says how to write one"


def test_upper_case_gets_a_hint() -> None:
    with pytest.raises(InvalidReference) as caught:
        parse("docker://reg.io#Team/App")
    assert caught.value.hint == "repository names are lower case"
