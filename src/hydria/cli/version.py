"""``hydria version``: print the version."""

from __future__ import annotations

import argparse

from hydria.version import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """enroot ignores extra arguments to ``version``; so does hydria."""
    parser.add_argument("ignored", nargs="*", help=argparse.SUPPRESS)


def run(options: argparse.Namespace) -> int:
    print(__version__)
    return 0
