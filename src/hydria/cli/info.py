"""``hydria info``: the version, the configuration files read and every setting in effect."""

from __future__ import annotations

import argparse
import os

from hydria.config import CONF_FILE, Settings
from hydria.version import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also say where each setting comes from")
    parser.add_argument("--json", action="store_true",
                        help="print {version, config_file, settings: {NAME: {value, origin}}} as JSON")


def run(options: argparse.Namespace, settings: Settings) -> int:
    variables = {**settings.as_variables(), **settings.environment}
    config_file = os.path.join(settings.sysconf_path, CONF_FILE)
    if options.json:
        import json

        print(json.dumps({"version": __version__, "config_file": config_file,
                          "settings": {name: {"value": variables[name], "origin": settings.origins[name]}
                                       for name in sorted(variables)}}, indent=1))
        return 0
    print(f"Hydria version: {__version__}")
    print(f"Config file: {config_file}")
    for name in sorted(variables):
        origin = f"  # {settings.origins[name]}" if options.verbose else ""
        print(f"{name}={variables[name]}{origin}")
    return 0
