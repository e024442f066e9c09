"""No file a user names or places hangs hydria: a FIFO where hydria reads a file from a user's
input is refused at once with an error that names it, or, in a folder of configuration files
(environ.d), left out with a warning that names it. One row per such input: a new one takes part
by adding its row."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hydria.runtime.layered import layered_text
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

Setup = Callable[[Path, Path], tuple[list[str], Path]]  # (folder, a real image) -> (hydria's arguments, the FIFO)


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path, 0o666)
    return path


def _context(folder: Path, dockerfile: str = "FROM scratch\n") -> Path:
    context = folder / "context"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile)
    return context


def _layered_naming_a_fifo(folder: Path, image: Path) -> tuple[list[str], Path]:
    fifo = _fifo(folder / "layer.sqsh")
    (folder / "image.layers").write_bytes(layered_text(["layer.sqsh"]))
    return ["start", str(folder / "image.layers"), "true"], fifo


def _oci_bundle(folder: Path, image: Path) -> tuple[list[str], Path]:
    return ["oci", "run", "--bundle", str(folder)], _fifo(folder / "config.json")


def _oci_layout_file(name: str) -> Setup:
    """An OCI layout whose ``name`` (its index, or a blob it names) is a FIFO."""
    def setup(folder: Path, image: Path) -> tuple[list[str], Path]:
        layout = folder / "layout"
        (layout / "blobs" / "sha256").mkdir(parents=True)
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        digest = "0" * 64
        if name != "index.json":
            (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{digest}",
                 "size": 2}]}))
        return ["import", "-o", str(folder / "out.sqsh"), f"oci://{layout}"], \
            _fifo(layout / (name if name == "index.json" else f"blobs/sha256/{digest}"))
    return setup


def _dockerignore(folder: Path, image: Path) -> tuple[list[str], Path]:
    context = _context(folder)
    return ["build", "-o", str(folder / "out.sqsh"), str(context)], _fifo(context / ".dockerignore")


def _dockerfile(folder: Path, image: Path) -> tuple[list[str], Path]:
    context = _context(folder)
    return ["build", "-f", str(folder / "Dockerfile"), "-o", str(folder / "out.sqsh"), str(context)], \
        _fifo(folder / "Dockerfile")


def _secret(folder: Path, image: Path) -> tuple[list[str], Path]:
    context = _context(folder, "FROM scratch\nRUN --mount=type=secret,id=s true\n")
    return ["build", "--secret", f"id=s,src={folder / 'secret'}", "-o", str(folder / "out.sqsh"), str(context)], \
        _fifo(folder / "secret")


def _user_configuration(folder: Path, image: Path) -> tuple[list[str], Path]:
    return ["start", str(image), "true"], _fifo(folder / "config" / "hydria.conf")


def _environ_file(folder: Path, image: Path) -> tuple[list[str], Path]:
    return ["start", str(image), "true"], _fifo(folder / "config" / "environ.d" / "site.env")


def _batch_configuration(folder: Path, image: Path) -> tuple[list[str], Path]:
    return ["batch", str(folder / "job.conf"), "true"], _fifo(folder / "job.conf")


INPUTS: dict[str, Setup] = {
    "an image file to start": lambda folder, image: (["start", str(folder / "i.sqsh"), "true"], _fifo(folder / "i.sqsh")),
    "an image file to create from": lambda folder, image: (["create", "-n", "x", str(folder / "i.sqsh")],
                                                            _fifo(folder / "i.sqsh")),
    "a layered image": lambda folder, image: (["start", str(folder / "i.layers"), "true"], _fifo(folder / "i.layers")),
    "a layer image that a layered image names": _layered_naming_a_fifo,
    "an OCI bundle's config.json": _oci_bundle,
    "an OCI layout's index.json": _oci_layout_file("index.json"),
    "a blob of an OCI layout": _oci_layout_file("blob"),
    "a docker archive": lambda folder, image: (["import", "-o", str(folder / "out.sqsh"),
                                                f"docker-archive://{folder / 'a.tar'}"], _fifo(folder / "a.tar")),
    "an OCI archive": lambda folder, image: (["import", "-o", str(folder / "out.sqsh"),
                                              f"oci-archive://{folder / 'a.tar'}"], _fifo(folder / "a.tar")),
    "a build context's .dockerignore": _dockerignore,
    "a Dockerfile": _dockerfile,
    "a build secret": _secret,
    "the user's hydria.conf": _user_configuration,
    "an environ.d file": _environ_file,
    "a batch configuration": _batch_configuration,
    "a --conf script": lambda folder, image: (["start", "--conf", str(folder / "c.sh"), str(image), "true"],
                                              _fifo(folder / "c.sh")),
    "an --rc script": lambda folder, image: (["start", "--rc", str(folder / "rc"), str(image), "true"],
                                             _fifo(folder / "rc")),
}


LEFT_OUT = {"an environ.d file"}  # a folder's files: the others are used


@pytest.mark.parametrize("what", INPUTS)
def test_a_fifo_is_refused_at_once_and_named(what: str, images: dict[str, Path], workspace: Workspace) -> None:
    folder = workspace.root
    arguments, fifo = INPUTS[what](folder, images["busybox"])
    for path in (folder, *folder.rglob("*")):
        os.lchown(path, workspace.user.uid, workspace.user.gid)
    result = workspace.run(*arguments, timeout=60)  # a FIFO opened for reading blocks: the test ends in time
    assert (result.returncode == 0) == (what in LEFT_OUT), result.stderr
    assert str(fifo) in result.stderr, result.stderr
    assert "not a regular file" in result.stderr or "is not a file you can read" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_dockerignore_that_links_out_of_the_context_is_refused(workspace: Workspace) -> None:
    secret = workspace.root / "outside"
    secret.write_text("*\n")
    context = _context(workspace.root)
    (context / ".dockerignore").symlink_to(secret)
    for path in (workspace.root, *workspace.root.rglob("*")):
        os.lchown(path, workspace.user.uid, workspace.user.gid)
    result = workspace.run("build", "-o", str(workspace.out / "out.sqsh"), str(context), timeout=60)
    assert result.returncode == 1
    assert f"{context / '.dockerignore'} is a link to {secret}, outside the build context" in result.stderr
    assert list(workspace.out.iterdir()) == []
