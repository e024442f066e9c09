"""``hydria remove [-f] NAME...``: delete containers (asks unless --force)."""

from __future__ import annotations

import argparse
import sys

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--force", action="store_true", help="do not ask for confirmation")
    parser.add_argument("names", nargs="+", metavar="NAME")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.store import Store

    store = Store(settings)
    for name in options.names:
        path = store.path(name)
        store.container(name)  # raises when it does not exist
        if not (options.force or settings.force_override):
            print(f"Do you really want to delete {path}? [y/N] ", end="", file=sys.stderr, flush=True)
            if sys.stdin.readline().strip() not in ("y", "Y"):
                continue
        store.remove(name)
    return 0
