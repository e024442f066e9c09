"""``hydria stage [-a ARCH] IMAGE``: in a batch script, import a registry image once and
broadcast it (sbcast) to every node of the allocation (hydria/slurm/stage.py).
``--adopt FILE --digest D IMAGE`` is what each node runs to take the broadcast file."""

from __future__ import annotations

import argparse

from hydria.config import Settings
from hydria.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    parser.add_argument("--adopt", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--digest", help=argparse.SUPPRESS)
    parser.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.slurm import stage

    if options.adopt:
        if not options.digest:
            raise UsageError("--adopt needs --digest")
        stage.adopt(options.adopt, options.uri, options.digest, options.arch, settings)
        return 0
    nodes = stage.stage(options.uri, settings, options.arch)
    print(f"staged {options.uri} on {nodes} node(s)")
    return 0
