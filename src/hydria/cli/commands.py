"""The command line: dispatch to one module per command, render errors, return exit codes.

Command modules are imported only when their command runs, so ``hydria version`` and the
container start path do not pay for what other commands import.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from hydria.cli.logsetup import guarded, setup_logging
from hydria.errors import UsageError, did_you_mean
from hydria.log import Logger
from hydria.record import Record

log = Logger("hydria")


class Command(Record):
    name: str
    summary: str
    module: str
    group: str  # where hydria --help lists it (GROUPS)
    example: str  # what help COMMAND shows, the arguments after the program's name
    needs_settings: bool = True
    # Makes or removes something (an image, a container, a bundle, a push, a prune): it says so
    # in one line, which -q silences (with every other message but warnings and errors), and
    # Ctrl-C stops it also where hydria started with SIGINT ignored (a script's background job);
    # a container's program keeps what it got.
    makes: bool = False
    # Runs whatever the configuration holds, saying what is wrong in it (hydria info): the way to
    # find the mistake that makes every other command fail.
    shows_configuration: bool = False


IMAGES, CONTAINERS, CLUSTER, SITE = "Images", "Containers", "Cluster", "Site and reference"
GROUPS = (IMAGES, CONTAINERS, CLUSTER, SITE)

COMMANDS: tuple[Command, ...] = (
    Command("import", "Import a container image", "hydria.cli.import_", IMAGES,
            "import docker://nvcr.io#nvidia/pytorch:24.01-py3", makes=True),
    Command("build", "Build an image from a Dockerfile, without root or a daemon", "hydria.cli.build", IMAGES,
            "build -t train:1 .", makes=True),
    Command("push", "Push an image you built (or an OCI layout) to a registry", "hydria.cli.push", IMAGES,
            "push train:1 docker://registry.example.com#lab/train:1", makes=True),
    Command("digest", "Show the digest of a registry image", "hydria.cli.digest", IMAGES,
            "digest docker://ubuntu:24.04"),
    Command("verify", "Show where an image came from and check its signatures now", "hydria.cli.verify", IMAGES,
            "verify --key ci.pub nvidia+pytorch+24.01-py3.sqsh"),
    Command("bundle", "Make a self-extracting bundle from an image file", "hydria.cli.bundle", IMAGES,
            "bundle -o train.run train.sqsh", makes=True),
    Command("cache", "List or prune what you keep in the cache", "hydria.cli.cache", IMAGES,
            "cache prune --to 20G", makes=True),
    Command("create", "Create a container from an image file", "hydria.cli.create", CONTAINERS,
            "create --name torch nvidia+pytorch+24.01-py3.sqsh", makes=True),
    Command("load", "Import and create a container in one step", "hydria.cli.load", CONTAINERS,
            "load --name torch docker://nvcr.io#nvidia/pytorch:24.01-py3"),
    Command("start", "Start a container and run a command in it", "hydria.cli.start", CONTAINERS,
            "start --mount /scratch:/data torch python train.py"),
    Command("exec", "Run a command in a running container", "hydria.cli.exec_", CONTAINERS,
            "exec 12345 nvidia-smi"),
    Command("list", "List containers", "hydria.cli.list_", CONTAINERS, "list --fancy"),
    Command("remove", "Remove containers", "hydria.cli.remove", CONTAINERS, "remove --force torch", makes=True),
    Command("export", "Write a container back to an image file", "hydria.cli.export", CONTAINERS,
            "export --output torch-patched.sqsh torch", makes=True),
    Command("batch", "Start a container from a configuration file", "hydria.cli.batch", CONTAINERS,
            "batch train.batch --epochs 3"),
    Command("cdi", "List the CDI devices of this node, for start --device", "hydria.cli.cdi", CONTAINERS,
            "cdi list"),
    Command("stage", "In a batch script: import an image once and broadcast it to every node", "hydria.cli.stage",
            CLUSTER, "stage docker://nvcr.io#nvidia/pytorch:24.01-py3", makes=True),
    Command("store", "The image store that every user reads and one account writes", "hydria.cli.store", CLUSTER,
            "store import docker://nvcr.io#nvidia/pytorch:24.01-py3", makes=True),
    Command("doctor", "Check that this node (or a cluster) can run hydria containers", "hydria.cli.doctor", CLUSTER,
            "doctor --cluster -- -N4 -p gpu"),
    Command("slurm", "The Slurm plugin's steps and its installation", "hydria.cli.slurm", CLUSTER,
            "slurm install-plugin"),
    Command("oci", "Run OCI bundles for Slurm's own containers (srun --container)", "hydria.cli.oci", CLUSTER,
            "oci conf", needs_settings=False),
    Command("info", "Show the version and the settings in effect", "hydria.cli.info", SITE, "info --verbose",
            shows_configuration=True),
    Command("install-reader", "Build hydria's fast squashfs reader for this installation",
            "hydria.cli.install_reader", SITE, "install-reader", needs_settings=False),
    Command("install-apparmor", "Install the AppArmor profile hydria needs where user namespaces are restricted",
            "hydria.cli.install_apparmor", SITE, "install-apparmor --print", needs_settings=False),
    Command("reference", "Print bash completion or man pages, made from the command line's parsers",
            "hydria.cli.reference", SITE, "reference man -o /usr/local/share/man/man1", needs_settings=False),
    Command("version", "Show the version", "hydria.cli.version", SITE, "version", needs_settings=False),
)
COMMAND_BY_NAME = {c.name: c for c in COMMANDS}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (exit 1, as enroot) instead of exiting with 2,
    and takes no abbreviations (``--ro`` must not quietly mean ``--root``)."""

    example = ""  # a whole command line, shown below the options (help COMMAND)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        return super().format_help() + (f"\nexample:\n  {self.example}\n" if self.example else "")

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, hint=self._option_meant(message) or f"run '{self.prog} --help' for usage")

    def _option_meant(self, message: str) -> str | None:
        """"did you mean --root?" for an unrecognized option close to one of the command's."""
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return None
        known = [option for action in self._actions for option in action.option_strings if option.startswith("--")]
        for word in message[len(prefix):].split():
            meant = did_you_mean(word.partition("=")[0], known, f"run '{self.prog} --help' for usage", cutoff=0.75) \
                if word.startswith("--") else None
            if meant:
                return meant
        return None


def program_name() -> str:
    """``enroot`` where the administrator installed hydria under enroot's name (a link named
    ``enroot``: docs/migration.md), else ``hydria``."""
    return "enroot" if os.path.basename(sys.argv[0]) == "enroot" else "hydria"


def general_usage() -> str:
    width = max(len(c.name) for c in COMMANDS)
    program = program_name()
    lines = [f"Usage: {program} COMMAND [ARG...]", "", "Command line utility for manipulating container images."]
    for group in GROUPS:
        lines += ["", f"{group}:"]
        lines += [f"   {c.name:<{width}}  {c.summary}" for c in COMMANDS if c.group == group]
    lines += ["", f"Run '{program} help COMMAND' for more information on a command, with an example."]
    return "\n".join(lines)


def run(argv: Sequence[str]) -> int:
    """Run one hydria command and return its exit status."""
    args = list(argv)
    setup_logging()
    if args[:1] == ["help"] and args[1:2] and args[1] in COMMAND_BY_NAME:
        args = [args[1], "--help"]  # hydria help COMMAND
    if not args or args[0] not in COMMAND_BY_NAME:
        if args and args[0] in ("help", "-h", "--help"):
            print(general_usage())
            if args[0] == "help" and args[1:]:
                log.error("Unknown command: %s", args[1])
                return 1
            return 0
        if args and args[0] == "--version":
            args[0] = "version"
        elif not args:
            print(general_usage(), file=sys.stderr)
            return 1
        else:  # a mistyped command: the usage line and a suggestion, not the whole list
            print(f"Usage: {program_name()} COMMAND [ARG...]", file=sys.stderr)
            log.error("Unknown command: %s", args[0])
            _suggest(args[0])
            return 1
    command = COMMAND_BY_NAME[args[0]]
    return guarded(lambda: _run(command, args[1:]))


def _suggest(word: str) -> None:
    """A hint with the command a typo was probably meant to be (``lst``: ``list``)."""
    meant = did_you_mean(word, COMMAND_BY_NAME, f"{program_name()} help lists the commands")
    log.info("hint: %s", meant or f"run '{program_name()} help' for the list of commands")


def build_parser(command: Command) -> ArgumentParser:
    """The command's parser: its module's ``add_arguments`` (also read by cli/reference.py)."""
    parser = ArgumentParser(prog=f"{program_name()} {command.name}", description=command.summary)
    parser.example = f"{program_name()} {command.example}"
    importlib.import_module(command.module).add_arguments(parser)
    if command.makes:
        _add_quiet(parser, False)
        for action in parser._actions:  # each ACTION's too (hydria store import -q URI)
            if isinstance(action, argparse._SubParsersAction):
                for subparser in action.choices.values():
                    _add_quiet(subparser, argparse.SUPPRESS)  # keeps what the command's -q said
    return parser


def _add_quiet(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="say nothing but warnings and errors (not what was made or removed)")


def _run(command: Command, args: list[str]) -> int:
    module = importlib.import_module(command.module)
    options = build_parser(command).parse_args(args)
    if command.makes and options.quiet:
        from hydria.log import WARNING, to_stderr

        to_stderr(WARNING)
    if not command.needs_settings:
        return int(module.run(options))
    from hydria.config import load_settings
    from hydria.interrupt import terminate_as_interrupt

    with terminate_as_interrupt(ctrl_c=command.makes):  # what a command half-wrote goes, as on Ctrl-C
        if not command.shows_configuration:
            return int(module.run(options, load_settings()))
        from hydria.cli.logsetup import report
        from hydria.errors import ConfigError

        problems: list[ConfigError] = []
        settings = load_settings(problems=problems)
        for problem in problems:
            report(problem)
        status = int(module.run(options, settings))
        return status or (1 if problems else 0)
