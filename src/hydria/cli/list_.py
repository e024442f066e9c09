"""``hydria list [-f]``: the containers in the data path; with ``--fancy``, a table of their
running processes (as enroot's: NAME PID COMM STATE STARTED TIME MNTNS USERNS COMMAND), where
containers started from image files appear as ``<unknown>``, as enroot shows them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from hydria.config import Settings

if TYPE_CHECKING:
    from hydria.container.named_containers import NamedContainers

COLUMNS = ("NAME", "PID", "COMM", "STATE", "STARTED", "TIME", "MNTNS", "USERNS", "COMMAND")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--fancy", action="store_true", help="show running processes too")
    parser.add_argument("--json", action="store_true", help="print the containers and their processes as "
                        "JSON: [{name, path, kind, reference, digest, processes: [{pid, comm, state, started, "
                        "time, mntns, userns, command}]}]; reference and digest: where the container's image "
                        "came from, as it records it (hydria verify), null where it records none")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.container.named_containers import NamedContainers

    containers = NamedContainers(settings)
    if options.json:
        import json

        print(json.dumps(json_rows(containers), indent=1))
        return 0
    if not options.fancy:
        for name in containers.names():
            print(name)
        return 0
    print_table(fancy_rows(containers))
    return 0


def instances(containers: NamedContainers) -> list[tuple[str, list[dict[str, str]]]]:
    """Every container (and ``<unknown>`` for running image files, as enroot), in name order, with
    the columns of the first process of each running instance (PID, COMM, ... COMMAND)."""
    from hydria.container.running import UNKNOWN, describe

    processes = containers.running()
    found = []
    for name in sorted([*containers.names(), *([UNKNOWN] if UNKNOWN in processes else [])]):
        live = []
        for process in processes.get(name, []):
            columns = describe(process.pid)
            if columns is not None:  # not gone meanwhile
                live.append({"PID": str(process.pid), **columns, "MNTNS": _inode(process.mount_namespace),
                             "USERNS": _inode(process.user_namespace)})
        found.append((name, live))
    return found


def fancy_rows(containers: NamedContainers) -> list[list[str]]:
    rows = []
    for name, live in instances(containers):
        if not live:
            rows.append([name] + [""] * (len(COLUMNS) - 1))
        for index, columns in enumerate(live):
            rows.append([name if index == 0 else "", *(columns[column] for column in COLUMNS[1:])])
    return rows


def json_rows(containers: NamedContainers) -> list[dict[str, object]]:
    """Each container's name, directory and kind (``image``: an image file and an overlay,
    ``unpacked``: a tree; both null for ``<unknown>``), where its image came from (:func:`image_record`)
    and its running instances, with --fancy's columns in lower case (``pid`` a number)."""
    from hydria.container.named import ROOTFS
    from hydria.container.running import UNKNOWN

    rows: list[dict[str, object]] = []
    for name, live in instances(containers):
        path = None if name == UNKNOWN else containers.path(name)
        kind = None if path is None else "unpacked" if (path / ROOTFS).is_dir() else "image"
        reference, digest = image_record(containers, name) if path is not None else (None, None)
        processes = [{key.lower(): int(value) if key == "PID" else value for key, value in columns.items()}
                     for columns in live]
        rows.append({"name": name, "path": str(path) if path else None, "kind": kind, "reference": reference,
                     "digest": digest, "processes": processes})
    return rows


def image_record(containers: NamedContainers, name: str) -> tuple[str | None, str | None]:
    """The reference and manifest digest that the container's image records (its ``/etc/rc``:
    image/trust/provenance.py); None for what it does not record (an image built or made by
    hand, or one that enroot imported: no digest) or where it cannot be read (no sqfscat)."""
    from hydria.errors import HydriaError
    from hydria.image.trust.provenance import recorded_of

    try:
        found = recorded_of(containers.container(name), name)
    except HydriaError:
        return None, None
    return found.uri, found.digest


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [list(COLUMNS), *rows]) for i in range(len(COLUMNS) - 1)]
    for row in [list(COLUMNS), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])


def _inode(namespace: str) -> str:
    """``mnt:[4026531840]`` -> ``4026531840``, as ps shows namespaces."""
    return namespace[namespace.find("[") + 1:-1] if "[" in namespace else namespace
