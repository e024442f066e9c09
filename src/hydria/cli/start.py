"""``hydria start [options] NAME|IMAGE [COMMAND [ARG...]]``: start a container and run a command."""

from __future__ import annotations

from hydria.config import Settings
from hydria.container import options as start_options
from hydria.errors import UsageError
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # imported here: a plain start runs without argparse (cli/quickstart.py)
    from argparse import REMAINDER

    start_options.add_arguments(parser)
    parser.add_argument("target", metavar="NAME|IMAGE", nargs="?")  # required: run() says so
    parser.add_argument("command", nargs=REMAINDER, help="optional: the image's command when left out")


def run(options: argparse.Namespace, settings: Settings) -> int:
    if not options.target:
        raise UsageError("a container name or image file is required",
                         hint="hydria start [OPTIONS] NAME|IMAGE [COMMAND [ARG...]]; the command is optional")
    conf = None
    if options.conf is not None:
        conf, settings = start_options.load_conf(options.conf)
    start_options.start_from(options, settings, conf)
    return 1  # start() execs the container or raises
