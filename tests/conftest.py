"""The test bed as fixtures: a real registry on 127.0.0.1, test images built from Debian packages
(pushed to the registry and written as OCI layout, OCI archive and docker archive), and the
unprivileged users that runtime tests run hydria as. ``scripts/setup.sh`` installs what they need.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.publish import PublishedImage, publish
from testbed.registry import Registry
from testbed.users import STORE_USER, TEST_USERS, User

VENV_BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"
SEED_VARIABLE = "HYDRIA_TEST_SEED"


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' plugin reads its seed option
def pytest_configure(config: pytest.Config) -> None:
    """Property tests reproducible: one seed for the run (``--hypothesis-seed``, else
    ``HYDRIA_TEST_SEED``, else a new one), printed in the header, and no example database, so
    that a run's failure is the same when it is run again with that seed, on any machine."""
    from hypothesis import settings

    settings.register_profile("hydria", database=None, print_blob=True)
    settings.load_profile("hydria")
    if config.getoption("hypothesis_seed") is None:
        import secrets

        config.option.hypothesis_seed = int(os.environ.get(SEED_VARIABLE) or secrets.randbelow(1 << 32))


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed")
    return f"property tests' seed: {seed} (the same examples again: {SEED_VARIABLE}={seed} bash scripts/test.sh)"


@pytest.fixture(scope="session")
def image_workdir() -> Iterator[Path]:
    """Outside pytest's root-only temporary tree, because the test users read the images."""
    path = Path(tempfile.mkdtemp(prefix="hydria-test-images-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Debian's docker-registry, plain HTTP on a free port of 127.0.0.1."""
    with Registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="session")
def busybox(registry: Registry, image_workdir: Path) -> PublishedImage:
    """One layer: Debian's static busybox. Cheap; use it unless a test needs more."""
    return publish("busybox", "latest", registry, image_workdir)


@pytest.fixture(scope="session")
def debian(registry: Registry, image_workdir: Path) -> PublishedImage:
    """Debian bookworm with python3 in three layers, whiteouts, an opaque directory, links."""
    return publish("debian", "bookworm", registry, image_workdir)


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
def store_user() -> User:
    """The account that writes the image store (a dedicated user, as a site names one)."""
    return _user(STORE_USER)


@pytest.fixture(scope="session")
def hydria_bin() -> str:
    """The ``hydria`` command of this checkout's virtual environment."""
    path = shutil.which("hydria", path=str(VENV_BIN))
    if path is None:
        pytest.fail(f"{VENV_BIN}/hydria is missing: run scripts/setup.sh")
    return path
