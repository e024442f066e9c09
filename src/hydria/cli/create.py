"""``hydria create [-n NAME] [-f] [--unpack] IMAGE``: make a named container from an image file."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--name", help="container name (default: the image name without .sqsh)")
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing container")
    parser.add_argument("--unpack", action="store_true",
                        help="unpack into a directory tree instead of mounting the image at start")
    parser.add_argument("image")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria import api
    from hydria.log import Logger

    made = api.create(options.image, options.name, force=options.force, unpack=options.unpack or settings.unpack,
                      settings=settings)
    Logger("hydria").info("Container %s created from %s", made.name, options.image)
    return 0
