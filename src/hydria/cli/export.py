"""``hydria export [-o FILE] [-f] NAME``: write a container back to a squashfs image file."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="image file to write (default: NAME.sqsh here)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing file")
    parser.add_argument("name")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria import api
    from hydria.log import Logger

    image = api.export(options.name, options.output, force=options.force, settings=settings)
    Logger("hydria").info("Image written to %s", image)
    return 0
