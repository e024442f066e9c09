"""The test bed as fixtures: a real registry on 127.0.0.1, test images built from Debian packages
(pushed to the registry and written as OCI layout, OCI archive and docker archive), and the
unprivileged users that runtime tests run hydria as. ``scripts/setup.sh`` installs what they need.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.oci import Image, push, write_docker_archive, write_oci_archive, write_oci_layout
from testbed.recipes import get_image
from testbed.registry import Registry
from testbed.users import TEST_USERS, User

VENV_BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"


@dataclass(frozen=True)
class PublishedImage:
    """One test image in every form hydria imports from."""

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


@pytest.fixture(scope="session")
def image_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("images")
    path.chmod(0o755)  # the test users read the archives
    return path


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Debian's docker-registry, plain HTTP on a free port of 127.0.0.1."""
    with Registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


def _publish(name: str, tag: str, registry: Registry, workdir: Path) -> PublishedImage:
    image = get_image(name, workdir)
    repository = f"hydria/{name}"
    digest = push([image], registry.address, repository, tag, workdir)
    forms = workdir / name
    forms.mkdir()
    write_oci_layout([image], forms / "oci", tag, workdir)
    write_oci_archive([image], forms / "oci-archive.tar", tag, workdir)
    write_docker_archive(image, forms / "docker-archive.tar", f"{repository}:{tag}", workdir)
    for path in forms.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return PublishedImage(name, image, registry.address, repository, tag, digest,
                          forms / "oci", forms / "oci-archive.tar", forms / "docker-archive.tar")


@pytest.fixture(scope="session")
def busybox(registry: Registry, image_workdir: Path) -> PublishedImage:
    """One layer: Debian's static busybox. Cheap; use it unless a test needs more."""
    return _publish("busybox", "latest", registry, image_workdir)


@pytest.fixture(scope="session")
def debian(registry: Registry, image_workdir: Path) -> PublishedImage:
    """Debian bookworm with python3 in three layers, whiteouts, an opaque directory, links."""
    return _publish("debian", "bookworm", registry, image_workdir)


def _user(name: str) -> User:
    if os.geteuid() != 0:
        pytest.fail("tests that run hydria as an ordinary user must be started as root "
                    "(scripts/test.sh); tests/unit needs no root")
    try:
        return User.lookup(name)
    except KeyError:
        pytest.fail(f"test user {name} is missing: run scripts/setup.sh as root")


@pytest.fixture(scope="session")
def test_user() -> User:
    """The unprivileged user that runtime tests run hydria as."""
    return _user(TEST_USERS[0])


@pytest.fixture(scope="session")
def other_user() -> User:
    """A second unprivileged user, for isolation tests between users."""
    return _user(TEST_USERS[1])


@pytest.fixture(scope="session")
def hydria_bin() -> str:
    """The ``hydria`` command of this checkout's virtual environment."""
    path = shutil.which("hydria", path=str(VENV_BIN))
    if path is None:
        pytest.fail(f"{VENV_BIN}/hydria is missing: run scripts/setup.sh")
    return path
