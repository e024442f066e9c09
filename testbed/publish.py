"""A test image in every form hydria imports from: a registry tag, OCI layout, OCI archive,
docker archive."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.oci import Image, push, write_docker_archive, write_oci_archive, write_oci_layout
from testbed.recipes import get_image
from testbed.registry import Registry


@dataclass(frozen=True)
class PublishedImage:
    name: str
    image: Image
    registry: str  # HOST:PORT
    repository: str
    tag: str
    digest: str  # of the manifest the tag points to
    oci_layout: Path
    oci_archive: Path
    docker_archive: Path

    @property
    def docker_uri(self) -> str:
        """enroot's form: docker://REGISTRY#REPOSITORY:TAG."""
        return f"docker://{self.registry}#{self.repository}:{self.tag}"


def publish(name: str, tag: str, registry: Registry, workdir: Path) -> PublishedImage:
    """Build (or take from the cache) recipe ``name``, push it, and write its local forms into
    ``workdir/name``, readable by every user."""
    image = get_image(name, workdir)
    repository = f"hydria/{name}"
    digest = push([image], registry.address, repository, tag, workdir)
    forms = workdir / name
    forms.mkdir()
    write_oci_layout([image], forms / "oci", tag, workdir)
    write_oci_archive([image], forms / "oci-archive.tar", tag, workdir)
    write_docker_archive(image, forms / "docker-archive.tar", f"{repository}:{tag}", workdir)
    for path in [forms, *forms.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return PublishedImage(name, image, registry.address, repository, tag, digest,
                          forms / "oci", forms / "oci-archive.tar", forms / "docker-archive.tar")


def push_as(image: PublishedImage, registry: Registry, name: str, workdir: Path) -> str:
    """``image`` pushed again as ``hydria/NAME:latest`` (a reference of a test's own); its URI."""
    work = workdir / name
    work.mkdir(exist_ok=True)
    push([image.image], registry.address, f"hydria/{name}", "latest", work)
    return f"docker://{registry.address}#hydria/{name}:latest"
