"""Running hydria as the unprivileged test user, in a workspace of its own."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hydria.trees import delete_tree
from testbed import slurm
from testbed.publish import PublishedImage
from testbed.users import User, run_as
from testbed.workspace import Workspace


def make_workspace(user: User, hydria: str) -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix=f"hydria-ws-{user.name}-"))
    root.chmod(0o755)
    for sub in ("out", "config"):
        (root / sub).mkdir()
    for path in (root, root / "out", root / "config"):
        os.chown(path, user.uid, user.gid)
    yield Workspace(user, root, hydria)
    delete_tree(root)  # containers' writes may be deeper than shutil.rmtree's recursion reaches


@pytest.fixture
def workspace(test_user: User, hydria_bin: str) -> Iterator[Workspace]:
    yield from make_workspace(test_user, hydria_bin)


@pytest.fixture
def other_workspace(other_user: User, hydria_bin: str) -> Iterator[Workspace]:
    yield from make_workspace(other_user, hydria_bin)


@pytest.fixture
def store_workspace(store_user: User, hydria_bin: str) -> Iterator[Workspace]:
    """The image store's owner (docs/store.md)."""
    yield from make_workspace(store_user, hydria_bin)


@pytest.fixture
def store(store_user: User) -> Iterator[Path]:
    """An image store's directory, as the administrator makes it for its owner (who then runs
    ``hydria store init``)."""
    parent = Path(tempfile.mkdtemp(prefix="hydria-store-"))
    parent.chmod(0o755)
    path = parent / "store"
    path.mkdir(mode=0o755)
    os.chown(path, store_user.uid, store_user.gid)
    yield path
    subprocess.run(["rm", "-rf", str(parent)], check=True)


@pytest.fixture
def site_store(store: Path) -> Iterator[Path]:
    """``store`` named in the system configuration, as a site names it (a Slurm job cannot)."""
    conf = Path("/etc/hydria/hydria.conf.d/60-hydria-testbed-store.conf")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"HYDRIA_STORE_PATH {store}\n")
    yield store
    conf.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def images(busybox: PublishedImage, debian: PublishedImage, image_workdir: Path,
           hydria_bin: str, test_user: User) -> dict[str, Path]:
    """The test images imported once, readable by every user."""
    directory = image_workdir / "sqsh"
    directory.mkdir(exist_ok=True)
    directory.chmod(0o777)
    result = {}
    for image in (busybox, debian):
        target = directory / f"{image.name}.sqsh"
        if not target.exists():
            done = run_as(test_user, [hydria_bin, "import", "-q", "-o", str(target), image.docker_uri],
                          env={"HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(directory / "cache")})
            assert done.returncode == 0, done.stderr
        result[image.name] = target
    return result


@pytest.fixture(scope="session")
def mpi_image(image_workdir: Path, hydria_bin: str, test_user: User) -> Path:
    """The ``mpi`` test image (Open MPI, mpi4py, an MPICH program), imported from an OCI archive."""
    from testbed.oci import write_oci_archive
    from testbed.recipes import get_image

    directory = image_workdir / "mpi"
    directory.mkdir(mode=0o755, exist_ok=True)
    archive = directory / "mpi.tar"
    write_oci_archive([get_image("mpi", directory)], archive, "latest", directory)
    archive.chmod(0o644)
    os.chown(directory, test_user.uid, test_user.gid)
    target = directory / "mpi.sqsh"
    done = run_as(test_user, [hydria_bin, "import", "-q", "-o", str(target), f"oci-archive://{archive}"],
                  env={"HYDRIA_CACHE_PATH": str(directory / "cache")}, cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    return target


@pytest.fixture(scope="module")
def cluster(hydria_bin: str) -> Iterator[None]:
    """The Slurm test cluster (testbed/slurm.py) with the plugin, for one test module."""
    slurm.start(hydria_bin)
    yield
    slurm.stop()


@pytest.fixture
def submit(cluster: None, workspace: Workspace) -> slurm.Submitter:
    """Slurm's client commands as the test user, against the running test cluster."""
    return slurm.Submitter(workspace)


@pytest.fixture
def shared_cache() -> Iterator[Path]:
    """A cache directory for several users: world-writable and sticky, like /tmp."""
    path = Path("/tmp") / f"hydria-shared-cache-{os.getpid()}-{threading.get_ident()}"
    path.mkdir(mode=0o1777)
    path.chmod(0o1777)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)
