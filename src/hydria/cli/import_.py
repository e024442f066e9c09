"""``hydria import [-a ARCH] [-o FILE] [-q] URI``: make a squashfs image file from an image."""

from __future__ import annotations

import argparse

from hydria.config import Settings
from hydria.log import Logger

log = Logger("hydria")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    parser.add_argument("-o", "--output", help="image file to write (default: derived from the URI)")
    parser.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST], dockerd://IMAGE, "
                        "podman://IMAGE, oci://DIR[:REF], oci-archive://FILE[:REF], docker-archive://FILE")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria import api

    image = api.import_image(options.uri, options.output, arch=options.arch, settings=settings)
    log.info("Image written to %s", image)
    return 0
