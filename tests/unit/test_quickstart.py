"""The argparse-free ``hydria start`` (cli/quickstart.py) gives what argparse gives, or declines."""

from __future__ import annotations

import pytest

from hydria.cli import start
from hydria.cli.commands import ArgumentParser
from hydria.cli.quickstart import parse

PLAIN = [
    ["img.sqsh"],
    ["img.sqsh", "ls", "-la", "--rw"],
    ["-r", "-w", "--pid", "--net", "--ipc", "--uts", "name", "true"],
    ["--root", "--rw", "name"],
    ["-e", "A=1", "--env", "B", "--env=C=3", "-m", "/a:/b", "--mount=/c:/d:none:ro", "img", "cmd"],
    ["-c", "conf.sh", "--conf=other.sh", "--rc", "rc.sh", "img"],
]
DECLINED = [
    [], ["-h"], ["--help"], ["--bogus", "img"], ["-rw", "img"], ["--ro", "img"], ["-e"], ["-e", "", "img"],
    ["--env=", "img"], ["-e", "-x", "img"], ["--", "img"], ["-e", "A=1"], ["-x=1", "img"],
]


def argparse_view(args: list[str]) -> dict[str, object]:
    parser = ArgumentParser(prog="hydria start")
    start.add_arguments(parser)
    return vars(parser.parse_args(args))


@pytest.mark.parametrize("args", PLAIN)
def test_plain_command_lines_parse_as_argparse_does(args: list[str]) -> None:
    quick = parse(args)
    assert quick is not None and vars(quick) == argparse_view(args)


@pytest.mark.parametrize("args", DECLINED)
def test_everything_else_goes_to_argparse(args: list[str]) -> None:
    assert parse(args) is None

