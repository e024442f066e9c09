"""Bash completion and man pages made from the parsers: they offer what the commands take."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hydria.cli.commands import COMMANDS
from hydria.cli.main import main
from hydria.cli.reference import bash_completion, man_pages


def complete(words: list[str], tmp_path: Path) -> list[str]:
    """What bash offers for the last of ``words`` (a real bash, the generated script sourced)."""
    script = tmp_path / "hydria.bash"
    script.write_text(bash_completion())
    program = (f'source {script}; COMP_WORDS=({" ".join(repr(w) for w in words)}); '
               f'COMP_CWORD={len(words) - 1}; _hydria; printf "%s\\n" "${{COMPREPLY[@]}}"')
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True,
                          cwd=tmp_path).stdout.split()


def test_bash_completes_commands_and_their_options(tmp_path: Path) -> None:
    assert set(complete(["hydria", "st"], tmp_path)) == {"stage", "start", "store"}
    assert set(complete(["hydria", "star"], tmp_path)) == {"start"}
    assert set(complete(["hydria", "start", "--r"], tmp_path)) == {"--rc", "--root", "--rw"}
    assert set(complete(["enroot", "list", "--"], tmp_path)) == {"--help", "--fancy", "--json"}
    (tmp_path / "image.sqsh").write_text("")
    assert "image.sqsh" in complete(["hydria", "start", "ima"], tmp_path)


def test_man_pages_list_every_command_and_option() -> None:
    pages = man_pages()
    assert set(pages) == {"hydria.1", *(f"hydria-{c.name}.1" for c in COMMANDS)}
    start = pages["hydria-start.1"]
    assert start.startswith('.TH "HYDRIA-START" "1"')
    for flag in ("\\-\\-rw", "\\-\\-mount", "\\-\\-conf", "\\-\\-root"):
        assert flag in start


def test_reference_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference", "man", "--output", str(tmp_path)]) == 0
    assert (tmp_path / "hydria-import.1").read_text().startswith('.TH "HYDRIA-IMPORT"')
    assert main(["reference", "bash-completion", "--output", str(tmp_path)]) == 1
