"""hydria's Python API, for workflow tools: what the command line does, as functions that return
paths and results and raise :class:`hydria.errors.HydriaError` (its ``message`` and ``hint`` say
what went wrong and what to do) instead of printing.

Each function takes ``settings`` (from :func:`settings`, which reads the configuration files and
``HYDRIA_*`` variables as the command line does; the current ones when omitted). ``start`` runs
the container as a child process and returns its result: the command line's ``start`` replaces
its own process with the container's program, which a library cannot do to its caller.

    import hydria
    image = hydria.import_image("docker://registry.example.com#team/app:1.0")
    hydria.create(image, name="app")
    result = hydria.start("app", ["python3", "-c", "print(42)"], capture_output=True)

``import_image``, ``create``, ``start``, ``containers``, ``remove`` and ``export`` are also
``hydria.NAME``; ``bundle`` and ``doctor`` only ``hydria.api.NAME`` (``hydria.bundle`` and
``hydria.doctor`` are modules).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydria.config import Settings, load_settings
from hydria.paths import hydria_command

if TYPE_CHECKING:
    from hydria.doctor import NodeReport

__all__ = ["bundle", "containers", "create", "doctor", "export", "import_image", "remove", "settings", "start"]


def settings(environment: Mapping[str, str] | None = None) -> Settings:
    """The settings for ``environment`` (this process's by default). Raises ConfigError."""
    return load_settings(environment)


def import_image(uri: str, output: str | Path | None = None, *, arch: str | None = None,
                 settings: Settings | None = None) -> Path:
    """``hydria import``: the image at ``uri`` as a squashfs file; returns its path."""
    from hydria.image.importer import import_image as run

    return run(uri, settings or load_settings(), output=str(output) if output is not None else None, arch=arch)


def create(image: str | Path, name: str | None = None, *, force: bool = False, unpack: bool | None = None,
           settings: Settings | None = None) -> Path:
    """``hydria create``: a named container from an image file; returns its directory."""
    from hydria.container.named_containers import NamedContainers

    settings = settings or load_settings()
    return NamedContainers(settings).create(Path(image), name, force=force, unpack=settings.unpack if unpack is None else unpack)


def containers(settings: Settings | None = None) -> list[str]:
    """``hydria list``: the names of the containers in the data path."""
    from hydria.container.named_containers import NamedContainers

    return NamedContainers(settings or load_settings()).names()


def remove(name: str, settings: Settings | None = None) -> None:
    """``hydria remove -f``: delete a container."""
    from hydria.container.named_containers import NamedContainers

    containers = NamedContainers(settings or load_settings())
    containers.container(name)  # raises when there is no such container
    containers.remove([name])


def export(name: str, output: str | Path | None = None, *, force: bool = False,
           settings: Settings | None = None) -> Path:
    """``hydria export``: a container written back to a squashfs file; returns its path."""
    from hydria.container.export import export as run

    return run(name, str(output) if output is not None else None, force, settings or load_settings())


def bundle(image: str | Path, output: str | Path | None = None, *, target: str | None = None,
           description: str = "none", checksum: bool = False, include_config: bool = False,
           force: bool = False, settings: Settings | None = None) -> Path:
    """``hydria bundle``: a self-extracting bundle of an image file; returns its path."""
    from hydria.bundle.build import BundleOptions, build

    settings = settings or load_settings()
    return build(BundleOptions(Path(image), str(output) if output is not None else None, target, description,
                               checksum or settings.bundle_checksum, include_config or settings.bundle_all, force),
                 settings)


def start(target: str | Path, command: Sequence[str] = (), *, root: bool = False, rw: bool = False,
          env: Sequence[str] = (), mounts: Sequence[str] = (), devices: Sequence[str] = (), rc: str | None = None,
          conf: str | None = None, pid: bool = False, net: bool = False, ipc: bool = False, uts: bool = False,
          environment: Mapping[str, str] | None = None, check: bool = False, capture_output: bool = False,
          timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``hydria start``, in a child process: the container's exit status is the result's
    ``returncode``. ``environment`` is the child's (and so the settings'); this process's by
    default. With ``check``, a non-zero status raises ``subprocess.CalledProcessError``."""
    from hydria.container.options import defaults, words

    options = words(defaults(conf=conf, env=list(env), mount=list(mounts), device=list(devices), rc=rc, root=root,
                             rw=rw, pid=pid, net=net, ipc=ipc, uts=uts))
    return subprocess.run([*hydria_command(), "start", *options, str(target), *command], env=environment,
                          check=check, capture_output=capture_output, text=True, timeout=timeout)


def doctor(image: str | None = None, settings: Settings | None = None) -> NodeReport:
    """``hydria doctor``'s report for this node."""
    from hydria.doctor import node_report

    return node_report(settings or load_settings(), image)
