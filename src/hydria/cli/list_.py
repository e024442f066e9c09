"""``hydria list [-f]``: the containers in the data path; with ``--fancy``, a table of their
running processes (as enroot's: NAME PID COMM STATE STARTED TIME MNTNS USERNS COMMAND), where
containers started from image files appear as ``<unknown>``, as enroot shows them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from hydria.config import Settings

if TYPE_CHECKING:
    from hydria.store import Store

COLUMNS = ("NAME", "PID", "COMM", "STATE", "STARTED", "TIME", "MNTNS", "USERNS", "COMMAND")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--fancy", action="store_true", help="show running processes too")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.store import Store

    store = Store(settings)
    if not options.fancy:
        for name in store.names():
            print(name)
        return 0
    print_table(fancy_rows(store))
    return 0


def fancy_rows(store: Store) -> list[list[str]]:
    from hydria.runtime.running import UNKNOWN, describe

    processes = store.running()
    rows = []
    for name in sorted([*store.names(), *([UNKNOWN] if UNKNOWN in processes else [])]):
        described = [(p, describe(p.pid)) for p in processes.get(name, [])]
        live = [(p, d) for p, d in described if d is not None]
        if not live:
            rows.append([name] + [""] * (len(COLUMNS) - 1))
        for index, (process, columns) in enumerate(live):
            rows.append([name if index == 0 else "", str(process.pid), columns["COMM"], columns["STATE"],
                         columns["STARTED"], columns["TIME"], _inode(process.mount_namespace),
                         _inode(process.user_namespace), columns["COMMAND"]])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [list(COLUMNS), *rows]) for i in range(len(COLUMNS) - 1)]
    for row in [list(COLUMNS), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])


def _inode(namespace: str) -> str:
    """``mnt:[4026531840]`` -> ``4026531840``, as ps shows namespaces."""
    return namespace[namespace.find("[") + 1:-1] if "[" in namespace else namespace
