"""``hydria exec [-e KEY[=VAL]]... PID COMMAND [ARG...]``: run a command in a running container."""

from __future__ import annotations

import argparse
import os

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY[=VAL]",
                        help="set an environment variable (a bare KEY copies the host's value)")
    parser.add_argument("pid", type=int, help="a process of the container")
    parser.add_argument("command", nargs=argparse.REMAINDER)


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.container.execute import execute
    from hydria.errors import UsageError
    from hydria.runtime.environ import env_option

    if not options.command:
        raise UsageError("exec needs a PID and a command", hint="run 'hydria exec --help' for usage")
    execute(options.pid, options.command, dict(env_option(e, os.environ) for e in options.env))
    return 1  # execute() replaces this process or raises
