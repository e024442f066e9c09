"""``hydria batch CONFIG [COMMAND [ARG...]]``: ``start --conf CONFIG`` on the container or image that
the script's ``#HYDRIA_ROOTFS=`` (or ``#ENROOT_ROOTFS=``) directive names, so that a configuration
script can be run directly (``#!/usr/bin/env -S hydria batch``), as enroot's ``batch``."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("conf", metavar="CONFIG", help="configuration script with a #HYDRIA_ROOTFS= directive")
    parser.add_argument("command", nargs=argparse.REMAINDER)


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.container import options as start_options
    from hydria.errors import HydriaError

    conf, settings = start_options.load_conf(options.conf, "hydria batch's CONFIG")
    rootfs = conf.directives.get("ROOTFS")
    if not rootfs:
        raise HydriaError(f"Missing directive ENROOT_ROOTFS in {options.conf}",
                          hint="add a line #HYDRIA_ROOTFS=NAME|IMAGE (or #ENROOT_ROOTFS=) to the script")
    start_options.start_from(start_options.defaults(conf=options.conf, command=options.command, target=rootfs),
                             settings, conf)
    return 1  # start_from execs the container or raises
