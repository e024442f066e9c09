"""``hydria start``'s options, declared once. The command line (argparse, and cli/quickstart.py's
parse without it), bundles, ``batch``, the Python API and an MPI launcher's starts on other nodes
all read :data:`OPTIONS`; :func:`start_from` turns parsed options into a start.

Parsed options are any object with one attribute per option (argparse's namespace, or
:func:`defaults`' one), plus ``target`` and ``command``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING, Record

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from typing import Any, Union

    from hydria.config import Settings
    from hydria.runtime.confscript import ConfScript
    from hydria.runtime.rootfs import Container

    Parsed = Union[argparse.Namespace, SimpleNamespace]  # what argparse or defaults() gives


class StartOption(Record):
    """One option: ``kind`` "flag" (a switch), "value" (the last one given counts) or "list"
    (repeatable); a flag sets ``setting`` (config.py) over the configuration's value."""

    dest: str
    names: tuple[str, ...]
    kind: str
    help: str
    metavar: str | None = None
    setting: str | None = None
    path: bool = False  # a file path, made absolute for a start in another directory or on another node
    in_bundles: bool = True  # a bundle's header script takes it (its usage text lists them)


OPTIONS: tuple[StartOption, ...] = (
    StartOption("conf", ("-c", "--conf"), "value", "configuration script: environ(), mounts(), hooks(), rc() "
                "and #HYDRIA_*= directives", path=True),
    StartOption("env", ("-e", "--env"), "list", "set an environment variable (a bare KEY copies the host's value)",
                metavar="KEY[=VAL]"),
    StartOption("rc", ("--rc",), "value", "run this script instead of the image's /etc/rc", path=True),
    StartOption("root", ("-r", "--root"), "flag", "appear as root (uid 0) in the container", setting="remap_root"),
    StartOption("rw", ("-w", "--rw"), "flag", "make the root filesystem writable", setting="rootfs_writable"),
    StartOption("mount", ("-m", "--mount"), "list", "mount, as fstab fields separated by ':' "
                "(SRC:DST[:TYPE:OPTIONS])", metavar="FSTAB"),
    StartOption("device", ("--device",), "list", "a CDI device: its spec's device nodes, mounts, "
                "environment and hooks (hydria cdi list)", metavar="VENDOR/CLASS=NAME"),
    *(StartOption(ns, (f"--{ns}",), "flag", f"new {ns.upper()} namespace", setting=f"unshare_{ns}",
                  in_bundles=False) for ns in ("pid", "net", "ipc", "uts")),
)
FLAGS = {name: option.dest for option in OPTIONS if option.kind == "flag" for name in option.names}
VALUED = {name: option.dest for option in OPTIONS if option.kind != "flag" for name in option.names}
REPEATED = frozenset(option.dest for option in OPTIONS if option.kind == "list")


def defaults(**values: object) -> SimpleNamespace:
    """Parsed options with nothing given, then ``values`` (``target``, ``command``, options)."""
    empty: dict[str, Any] = {o.dest: [] if o.kind == "list" else False if o.kind == "flag" else None for o in OPTIONS}
    return SimpleNamespace(**{**empty, "target": None, "command": [], **values})


def add_arguments(parser: argparse.ArgumentParser, *, bundle: bool = False) -> None:
    for option in OPTIONS:
        if bundle and not option.in_bundles:
            continue
        if option.kind == "flag":
            parser.add_argument(*option.names, dest=option.dest, action="store_true", help=option.help)
        else:
            parser.add_argument(*option.names, dest=option.dest, help=option.help, metavar=option.metavar,
                                action="append" if option.kind == "list" else "store",
                                default=[] if option.kind == "list" else None)


def words(options: Parsed, *, host_environment: Mapping[str, str] | None = None) -> list[str]:
    """The options as a command line's words. For a start in another place (``host_environment``
    given): paths absolute, and a bare ``--env KEY`` with that environment's value."""
    out: list[str] = []
    for option in OPTIONS:
        value = getattr(options, option.dest)
        if option.kind == "flag":
            out += [option.names[-1]] if value else []
        elif option.kind == "value":
            if value:
                absolute = option.path and host_environment is not None
                out += [option.names[-1], os.path.abspath(value) if absolute else value]
        else:
            out += [f"{option.names[-1]}={_with_host_value(option, item, host_environment)}" for item in value]
    return out


def _with_host_value(option: StartOption, item: str, host_environment: Mapping[str, str] | None) -> str:
    if option.dest != "env" or host_environment is None or "=" in item or item not in host_environment:
        return item
    return f"{item}={host_environment[item]}"


def apply_flags(settings: Settings, options: Parsed) -> Settings:
    """``settings`` with the flags given on the command line switched on."""
    switched: dict[str, Any] = {o.setting: True for o in OPTIONS if o.setting is not None and getattr(options, o.dest)}
    return settings._replace(**switched)


def _target_taken_as_a_value(options: Parsed, settings: Settings) -> str | None:
    """``hydria start --env bb true``: --env took the container as its value, and ``true`` was
    read as the target. Says so when a value names a container or an image file."""
    from hydria.container.target import IMAGE_SUFFIXES

    for option in OPTIONS:
        values = getattr(options, option.dest) if option.kind == "list" else [getattr(options, option.dest)]
        for value in values:
            if not isinstance(value, str) or not value or "=" in value or "/" in value or value in (".", ".."):
                continue
            if os.path.isdir(os.path.join(settings.data_path, value)) or \
                    (value.endswith(IMAGE_SUFFIXES) and os.path.isfile(value)):
                return (f"{option.names[-1]} took {value} as its value, so {options.target} was read as the "
                        f"container: give {option.names[-1]} its value first (hydria start {option.names[-1]} "
                        f"VALUE {value} ...)")
    return None


def load_conf(path: str, argument: str = "--conf") -> tuple[ConfScript, Settings]:
    """The configuration script (given as ``argument``, for messages) and the settings with its
    directives applied over the environment."""
    from hydria.config import Assignment, load_settings
    from hydria.runtime.confscript import load

    conf = load(path, argument)
    directives = {f"HYDRIA_{name}": value for name, value in conf.directives.items() if name != "ROOTFS"}
    # In the environment too: as enroot exports them, they may move the configuration folders.
    # As overrides, named after the script (an empty one sets nothing, as an empty variable).
    named = [Assignment(key, value, True, f"{conf.path}: directive #{key}={value}")
             for key, value in directives.items() if value]
    return conf, load_settings({**os.environ, **directives}, overrides=named)


def start_from(options: Parsed, settings: Settings, conf: ConfScript | None = None,
               container: Container | None = None) -> None:
    """Start with the parsed ``options`` applied over ``settings``, from ``container`` (a root
    filesystem the caller resolved: a bundle's tree) or else the target the options name; execs
    or raises HydriaError."""
    from hydria.container.start import StartOptions, start
    from hydria.container.target import resolve_target

    target, command = options.target, options.command
    remote = None
    if container is None:
        try:
            container = resolve_target(target, settings)
        except HydriaError as e:
            e.hint = _target_taken_as_a_value(options, settings) or e.hint
            raise
        from hydria.hooks.launch import is_launcher, remote_start

        if is_launcher(command):  # an MPI launcher: its daemons start the same container elsewhere
            remote = remote_start(words(options, host_environment=os.environ), target, os.environ)
    first = command[0].partition("=")[0] if command else None
    misplaced = first if first in FLAGS or first in VALUED else None
    start(container, StartOptions(target, command, options.env, options.mount, options.rc, conf=conf,
                                  remote_start=remote, misplaced_option=misplaced, devices=options.device),
          apply_flags(settings, options))

