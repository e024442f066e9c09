"""``hydria install-reader``: build hydria's squashfs reader for this installation."""

from __future__ import annotations

import argparse

from hydria.runtime.reader_build import install_reader


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Compile hydria's squashfs reader against this node's libsquashfuse and libfuse 3 "
                          "and install it beside hydria, where every start finds it: programs in containers "
                          "then read the image several times faster than through squashfuse "
                          "(docs/performance.md). Run it as the owner of hydria's installation, again after "
                          "each upgrade.")


def run(options: argparse.Namespace) -> int:
    print(f"installed {install_reader()}")
    return 0
