"""``hydria bundle [-a] [-c] [-d TEXT] [-o FILE] [-t DIR] [-f] IMAGE``: make a self-extracting bundle."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--all", action="store_true",
                        help="include the settings in effect and the user's configuration folders")
    parser.add_argument("-c", "--checksum", action="store_true", help="embed a sha256, checked at every run")
    parser.add_argument("-d", "--desc", default="none", help="description shown by the bundle's --info and usage")
    parser.add_argument("-o", "--output", help="bundle file (default: IMAGE's name with .run, here)")
    parser.add_argument("-t", "--target", help="directory that --keep extracts to (default: the output's name)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing file")
    parser.add_argument("image")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria import api

    for name in ("desc", "target"):
        if getattr(options, name) == "":
            from hydria.errors import UsageError

            raise UsageError(f"--{name} takes a non-empty value")
    from hydria.log import Logger

    bundle = api.bundle(options.image, options.output, target=options.target, description=options.desc,
                        checksum=options.checksum, include_config=options.all, force=options.force, settings=settings)
    Logger("hydria").info("Bundle written to %s", bundle)
    return 0
