"""The command set, usage and exit codes (enroot's: 0 for help, 1 for usage and errors)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from hydria import __version__
from hydria.cli.commands import COMMANDS, GROUPS, Command, build_parser
from hydria.cli.main import main

ENROOT_COMMANDS = ["import", "create", "start", "exec", "list", "remove", "export", "bundle",
                   "batch", "load", "version"]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HYDRIA_SYSCONF_PATH", str(tmp_path / "etc"))


def test_no_arguments_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    err = capsys.readouterr().err
    assert "Usage: hydria COMMAND" in err


@pytest.mark.parametrize("word", ["help", "--help", "-h"])
def test_help_lists_every_command(word: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([word]) == 0
    out = capsys.readouterr().out
    for command in [*ENROOT_COMMANDS, "doctor"]:
        assert f"   {command} " in out


def test_help_groups_every_command_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == list(GROUPS)
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("   ")]
    assert sorted(listed) == sorted(c.name for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_help_of_every_command_shows_an_example_that_parses(command: Command,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert command.group in GROUPS
    with pytest.raises(SystemExit) as done:  # argparse's help exits, with 0
        main(["help", command.name])
    assert done.value.code == 0
    example = capsys.readouterr().out.split("\nexample:\n  ", 1)[1].strip()
    assert example == f"hydria {command.example}"
    build_parser(command).parse_args(shlex.split(command.example)[1:])  # raises UsageError if it went stale


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["Usage: hydria COMMAND [ARG...]", "[ERROR] Unknown command: frobnicate",
                                "[INFO] hint: run 'hydria help' for the list of commands"]
    assert main(["lst"]) == 1
    assert capsys.readouterr().err.splitlines() == ["Usage: hydria COMMAND [ARG...]", "[ERROR] Unknown command: lst",
                                                    "[INFO] hint: did you mean list? (hydria help lists the commands)"]
    assert main([]) == 1  # no command at all: the whole usage, every command
    assert "   import " in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["version"], ["--version"], ["version", "extra", "ignored"]])
def test_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out == f"{__version__}\n"


def test_info_prints_settings_with_origins(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hydria.conf").write_text("HYDRIA_MAX_CONNECTIONS 3\n")
    assert main(["info", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Hydria version: {__version__}\nConfig file: {tmp_path}/etc/hydria.conf\n")
    assert f"HYDRIA_MAX_CONNECTIONS=3  # {tmp_path}/etc/hydria.conf:1" in out
    assert f"HYDRIA_DATA_PATH={tmp_path}/.local/share/hydria  # default" in out


def test_bad_configuration_fails_every_command_that_reads_it_and_info_says_what_is_wrong(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HYDRIA_MAX_PROCESSORS", "lots")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hydria.conf").write_text("HYDRIA_DATAPATH /x\nHYDRIA_MAX_CONNECTIONS 3\n")
    problems = (f"[ERROR] Invalid configuration file: {tmp_path}/etc/hydria.conf:1: unknown setting HYDRIA_DATAPATH\n"
                "[INFO] hint: did you mean HYDRIA_DATA_PATH? (hydria info lists the settings)\n")
    assert main(["list"]) == 1
    assert capsys.readouterr().err == problems
    assert main(["info"]) == 1  # it runs all the same: the way to find what is wrong
    captured = capsys.readouterr()
    assert captured.err == problems + "[ERROR] Invalid configuration: environment variable HYDRIA_MAX_PROCESSORS: " \
        "'lots' is not a non-negative integer\n[INFO] hint: a whole number of 0 or more, e.g. 4\n"
    assert "HYDRIA_MAX_CONNECTIONS=3\n" in captured.out and "HYDRIA_MAX_PROCESSORS=lots" not in captured.out


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--bogus"]) == 1
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and "hint: run 'hydria info --help'" in err


@pytest.mark.parametrize("argv", [
    ["start", "--ro", "image.sqsh", "true"],  # would have been --root: uid 0 inside
    ["start", "--mo", "/a:/b", "image.sqsh"],  # would have been --mount
    ["list", "--fan"],
    ["import", "--out", "x.sqsh", "docker://busybox"],
    ["remove", "--forc", "x"],
])
def test_no_option_is_abbreviated(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    assert f"unrecognized arguments: {argv[1]}" in capsys.readouterr().err


def test_installed_as_enroot_it_speaks_as_enroot(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An administrator's link named enroot (docs/migration.md): usage and hints say enroot."""
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/enroot"])
    assert main([]) == 1
    assert "Usage: enroot COMMAND" in capsys.readouterr().err
    assert main(["list", "--bogus"]) == 1
    assert "run 'enroot list --help' for usage" in capsys.readouterr().err


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == __version__ and report["config_file"].endswith("/etc/hydria.conf")
    assert report["settings"]["HYDRIA_ALLOW_HTTP"] == {"value": "n", "origin": "default"}


def test_help_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:  # argparse's --help
        main(["help", "start"])
    assert done.value.code == 0
    assert "usage: hydria start" in capsys.readouterr().out
    assert main(["help", "frobnicate"]) == 1
    assert "Unknown command: frobnicate" in capsys.readouterr().err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.makes], ids=lambda c: c.name)
def test_every_command_that_makes_or_removes_takes_quiet(command: Command) -> None:
    """A table over every command: a new one that makes something takes part by its ``makes``."""
    parser = build_parser(command)
    assert "-q" in parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                assert "-q, --quiet" in subparser.format_help(), f"{command.name} {name}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if not c.makes], ids=lambda c: c.name)
def test_a_command_that_runs_a_program_or_reads_takes_no_quiet_of_ours(command: Command) -> None:
    assert "say nothing but warnings and errors" not in build_parser(command).format_help()


@pytest.mark.parametrize(("argv", "hint"), [
    (["start", "--roo", "x"], "did you mean --root?"),
    (["import", "--outptu=x.sqsh", "docker://x"], "did you mean --output?"),
    (["create", "--nmae", "x", "y"], "did you mean --name?"),
    (["start", "--zzzzzz", "x"], "run 'hydria start --help' for usage"),
])
def test_a_mistyped_option_is_named_with_the_one_meant(argv: list[str], hint: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    assert f"[INFO] hint: {hint}" in capsys.readouterr().err


@pytest.mark.parametrize(("typed", "hint"), [
    ("ubunt.sqsh", "did you mean ubuntu.sqsh? (ls {folder} shows the files there)"),
    ("ubuntu.sqfs", "did you mean ubuntu.sqsh? (ls {folder} shows the files there)"),
    ("zzzz.sqsh", None),
    ("absent.sqsh", None),  # .sqsh alike, the rest not: no suggestion
])
@pytest.mark.parametrize("command", ["create", "start", "bundle"])
def test_a_mistyped_image_file_is_named_with_the_one_meant(command: str, typed: str, hint: str | None,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "ubuntu.sqsh").write_bytes(b"")
    monkeypatch.chdir(images)
    assert main([command, typed]) == 1
    err = capsys.readouterr().err
    assert f"No such file or directory: {images / typed}" in err
    if hint:
        assert f"[INFO] hint: {hint.format(folder=images)}" in err
    else:
        assert "did you mean" not in err
