"""``hydria digest [-a ARCH] URI``: print the registry's digest of an image's manifest (enroot's
``digest``, only ``docker://``)."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    parser.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.image.importer import image_digest

    print(image_digest(options.uri, settings, arch=options.arch))
    return 0
