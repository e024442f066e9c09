"""``hydria remove [-f] NAME...``: delete containers (asks unless --force); a running container is
refused, whatever --force says (enroot would delete the files under it)."""

from __future__ import annotations

import argparse
import sys

from hydria.config import Settings
from hydria.errors import HydriaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--force", action="store_true", help="do not ask for confirmation")
    parser.add_argument("names", nargs="+", metavar="NAME")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.container.store import Store

    store = Store(settings)
    for name in options.names:
        store.container(name)  # raises when it does not exist
    running = store.running()
    for name in options.names:  # all checked before any is removed
        if name in running:
            pids = ", ".join(str(process.pid) for process in running[name])
            raise HydriaError(f"Device or resource busy: container {name} is running (PID {pids})",
                              hint="removing it would leave the running instance without its files: end it "
                                   f"first (kill {pids}) and remove it then; hydria list --fancy shows it")
    for name in options.names:
        path = store.path(name)
        if not (options.force or settings.force_override):
            print(f"Do you really want to delete {path}? [y/N] ", end="", file=sys.stderr, flush=True)
            if sys.stdin.readline().strip() not in ("y", "Y"):
                continue
        store.remove(name)
    return 0
