"""``hydria load [-a ARCH] [-n NAME] [-f] URI``: import a registry image and create a container
from it in one step (as enroot's ``load``, only ``docker://``). The image is imported into the
data path and becomes the container's image file (a hardlink: no copy, no unpacking unless
``HYDRIA_UNPACK`` asks for it); nothing is left behind when a step fails."""

from __future__ import annotations

import argparse

from hydria.config import Settings
from hydria.log import Logger

log = Logger("hydria")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    parser.add_argument("-n", "--name", help="container name (default: the import's file name without .sqsh)")
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing container")
    parser.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from hydria.container.named_containers import NamedContainers
    from hydria.errors import AlreadyExists, InvalidArgument
    from hydria.image.importer import import_image
    from hydria.image.ref.reference import parse
    from hydria.paths import ensure_dir, hidden_sibling, process_tag

    if not options.uri.startswith("docker://"):
        raise InvalidArgument(options.uri, hint="load takes docker:// images; "
                              "for other sources run hydria import, then hydria create")
    name = options.name if options.name is not None else parse(options.uri).default_output().removesuffix(".sqsh")
    containers = NamedContainers(settings)
    target = containers.path(name)
    if target.exists() and not (options.force or settings.force_override):  # before any download
        raise AlreadyExists(target, hint="use --force to replace it")
    staging = Path(ensure_dir(settings.data_path, setting="HYDRIA_DATA_PATH"), hidden_sibling(name, "loading", process_tag(), "sqsh"))
    try:
        import_image(options.uri, settings, output=str(staging), arch=options.arch)
        containers.create(staging, name, force=options.force, unpack=settings.unpack)
    finally:
        staging.unlink(missing_ok=True)
    log.info("Container %s created in %s", name, settings.data_path)
    return 0
