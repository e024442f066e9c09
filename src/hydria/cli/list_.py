"""``hydria list``: the names of the containers in the data path."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--fancy", action="store_true", help="not supported yet")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.errors import HydriaError
    from hydria.store import Store

    if options.fancy:
        raise HydriaError("list --fancy: not implemented yet")
    for name in Store(settings).names():
        print(name)
    return 0
