"""``dockerd://IMAGE`` and ``podman://IMAGE``: an image of a local container engine, exported with
``docker save`` / ``podman save`` into a temporary docker archive and read from there."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from hydria.config import Settings
from hydria.errors import MissingTool
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import EngineImage, LocalImage
from hydria.image.sources.local import open_local
from hydria.paths import temp_folder
from hydria.tools import run_tool


def save_command(ref: EngineImage, archive: Path) -> list[str]:
    """The engine command that writes ``ref`` as a docker archive."""
    if ref.engine == "podman":
        return ["podman", "save", "--format", "docker-archive", "--output", str(archive), ref.image]
    return ["docker", "save", "--output", str(archive), ref.image]


def open_engine(ref: EngineImage, settings: Settings, stack: ExitStack) -> Callable[[mf.Platform], mf.ResolvedImage]:
    """Export the image, then read it as a docker archive. Raises HydriaError."""
    if shutil.which(ref.engine) is None:
        raise MissingTool(ref.engine,
                          hint=f"install {ref.engine}, or export the image and use docker-archive://")
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hydria.", dir=temp_folder(settings.temp_path))))
    archive = workdir / "image.tar"
    if ref.engine == "podman" and subprocess.run(["podman", "image", "exists", ref.image], check=False).returncode != 0:
        _run(["podman", "pull", "--quiet", ref.image], ref)
    _run(save_command(ref, archive), ref)
    resolve = open_local(LocalImage("docker-archive", str(archive)), workdir, stack)

    def resolve_with_engine_uri(want: mf.Platform) -> mf.ResolvedImage:
        resolved = resolve(want)
        return mf.ResolvedImage(ref.uri, resolved.config, resolved.layers, resolved.open_blob)
    return resolve_with_engine_uri


def _run(argv: list[str], ref: EngineImage) -> None:
    run_tool(argv, f"{argv[0]} {argv[1]} {ref.image} failed")
