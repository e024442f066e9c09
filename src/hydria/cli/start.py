"""``hydria start [options] NAME|IMAGE [COMMAND [ARG...]]``: start a container and run a command."""

from __future__ import annotations

import os

from hydria.config import Settings
from hydria.errors import UsageError
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from hydria.runtime.confscript import ConfScript
    from hydria.runtime.rootfs import Container


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # imported here: a plain start runs without argparse (cli/quickstart.py)
    from argparse import REMAINDER

    parser.add_argument("-c", "--conf", help="configuration script: environ(), mounts(), hooks(), rc() and "
                        "#HYDRIA_*= directives")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY[=VAL]",
                        help="set an environment variable (a bare KEY copies the host's value)")
    parser.add_argument("--rc", help="run this script instead of the image's /etc/rc")
    parser.add_argument("-r", "--root", action="store_true", help="appear as root (uid 0) in the container")
    parser.add_argument("-w", "--rw", action="store_true", help="make the root filesystem writable")
    parser.add_argument("-m", "--mount", action="append", default=[], metavar="FSTAB",
                        help="mount, as fstab fields separated by ':' (SRC:DST[:TYPE:OPTIONS])")
    for ns in ("pid", "net", "ipc", "uts"):
        parser.add_argument(f"--{ns}", action="store_true", help=f"new {ns.upper()} namespace")
    parser.add_argument("target", metavar="NAME|IMAGE", nargs="?")  # required: run() says so
    parser.add_argument("command", nargs=REMAINDER, help="optional: the image's command when left out")


def run(options: argparse.Namespace, settings: Settings) -> int:
    if not options.target:
        raise UsageError("a container name or image file is required",
                         hint="hydria start [OPTIONS] NAME|IMAGE [COMMAND [ARG...]]; the command is optional")
    conf = None
    if options.conf is not None:
        conf, settings = load_conf(options.conf)
    start_with(options, settings, conf)
    return 1  # start() execs the container or raises


def load_conf(path: str) -> tuple[ConfScript, Settings]:
    """The configuration script and the settings with its directives applied over the environment."""
    from hydria.config import load_settings
    from hydria.runtime.confscript import load

    conf = load(path)
    directives = {f"HYDRIA_{name}": value for name, value in conf.directives.items() if name != "ROOTFS"}
    return conf, load_settings({**os.environ, **directives})


def start_with(options: argparse.Namespace, settings: Settings, conf: ConfScript | None,
               container: Container | None = None) -> None:
    """Start with the command line's flags applied over ``settings`` (from ``container`` instead
    of the target the options name, if given); execs or raises."""
    from hydria.runtime.start import StartOptions, start

    settings = settings._replace(
        remap_root=settings.remap_root or options.root,
        rootfs_writable=settings.rootfs_writable or options.rw,
        unshare_pid=settings.unshare_pid or options.pid,
        unshare_net=settings.unshare_net or options.net,
        unshare_ipc=settings.unshare_ipc or options.ipc,
        unshare_uts=settings.unshare_uts or options.uts,
    )
    remote = None
    if container is None:  # hydria start from the command line: an MPI launcher starts it elsewhere too
        from hydria.launch import is_launcher, remote_start

        if is_launcher(options.command):
            remote = remote_start(start_arguments(options), options.target, os.environ)
    from hydria.cli.quickstart import FLAGS, VALUED

    first = options.command[0].partition("=")[0] if options.command else None
    start(StartOptions(options.target, options.command, options.env, options.mount, options.rc, conf=conf,
                       container=container, remote_start=remote,
                       misplaced_option=first if first in FLAGS or first in VALUED else None), settings)


def start_arguments(options: argparse.Namespace) -> list[str]:
    """The options of this start as another node must get them: paths absolute, and ``--env KEY``
    with this host's value."""
    words = ["--conf", os.path.abspath(options.conf)] if options.conf else []
    for variable in options.env:
        key = variable.split("=", 1)[0]
        words += ["--env", variable if "=" in variable or key not in os.environ else f"{key}={os.environ[key]}"]
    for mount in options.mount:
        words += ["--mount", mount]
    if options.rc:
        words += ["--rc", os.path.abspath(options.rc)]
    return words + [f"--{flag}" for flag in ("root", "rw", "pid", "net", "ipc", "uts") if getattr(options, flag)]
