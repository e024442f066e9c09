"""``hydria remove [-f] NAME...``: delete containers (asks unless --force); a running container is
refused, whatever --force says (enroot would delete the files under it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydria.cli.logsetup import report
from hydria.config import Settings
from hydria.errors import HydriaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--force", action="store_true", help="do not ask for confirmation")
    parser.add_argument("names", nargs="+", metavar="NAME")


def _ask(path: Path) -> bool:
    """The user's answer; an input that ends unanswered (a script without -f) is an error, as
    with enroot, whose exit status says the container is still there."""
    print(f"Do you really want to delete {path}? [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        print(file=sys.stderr)
        raise HydriaError(f"no answer: {path} is kept", hint="hydria remove -f NAME removes without asking")
    return answer.strip() in ("y", "Y")


def run(options: argparse.Namespace, settings: Settings) -> int:
    """The names that exist are removed even where others do not (each of those is reported and
    the exit status is 1); a running container among them stops all (none is removed)."""
    from hydria.container.named_containers import NamedContainers

    containers = NamedContainers(settings)
    present, missing = [], []
    for name in dict.fromkeys(options.names):  # each name once, in the order given
        try:
            containers.container(name)
            present.append(name)
        except HydriaError as e:
            missing.append(e)
    from hydria.log import Logger

    for name in containers.remove(present, confirm=None if options.force or settings.force_override else _ask):
        Logger("hydria").info("Container %s removed", name)
    for error in missing:
        report(error)
    return 1 if missing else 0
