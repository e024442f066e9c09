"""``hydria start [options] NAME|IMAGE [COMMAND [ARG...]]``: start a container and run a command."""

from __future__ import annotations

import argparse
import dataclasses

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--conf", help="configuration script (not supported yet)")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY[=VAL]",
                        help="set an environment variable (a bare KEY copies the host's value)")
    parser.add_argument("--rc", help="run this script instead of the image's /etc/rc")
    parser.add_argument("-r", "--root", action="store_true", help="appear as root (uid 0) in the container")
    parser.add_argument("-w", "--rw", action="store_true", help="make the root filesystem writable")
    parser.add_argument("-m", "--mount", action="append", default=[], metavar="FSTAB",
                        help="mount, as fstab fields separated by ':' (SRC:DST[:TYPE:OPTIONS])")
    for ns in ("pid", "net", "ipc", "uts"):
        parser.add_argument(f"--{ns}", action="store_true", help=f"new {ns.upper()} namespace")
    parser.add_argument("target", metavar="NAME|IMAGE")
    parser.add_argument("command", nargs=argparse.REMAINDER)


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.errors import HydriaError
    from hydria.runtime.start import StartOptions, start

    if options.conf is not None:
        raise HydriaError("start --conf: not implemented yet",
                          hint="use --env, --mount and --rc, or hooks.d, for now")
    settings = dataclasses.replace(
        settings,
        remap_root=settings.remap_root or options.root,
        rootfs_writable=settings.rootfs_writable or options.rw,
        unshare_pid=settings.unshare_pid or options.pid,
        unshare_net=settings.unshare_net or options.net,
        unshare_ipc=settings.unshare_ipc or options.ipc,
        unshare_uts=settings.unshare_uts or options.uts,
    )
    start(StartOptions(options.target, options.command, options.env, options.mount, options.rc), settings)
    return 1  # start() execs the container or raises
