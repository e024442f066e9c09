"""``hydria info``: the version, the configuration files read and every setting in effect."""

from __future__ import annotations

import argparse
import os

from hydria import __version__
from hydria.config import CONF_FILE, Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also say where each setting comes from")


def run(options: argparse.Namespace, settings: Settings) -> int:
    print(f"Hydria version: {__version__}")
    print(f"Config file: {os.path.join(settings.sysconf_path, CONF_FILE)}")
    variables = {**settings.as_variables(), **settings.environment}
    for name in sorted(variables):
        origin = f"  # {settings.origins[name]}" if options.verbose else ""
        print(f"{name}={variables[name]}{origin}")
    return 0
