"""Variable expansion in configuration values: a table of inputs and the errors that guard paths."""

from __future__ import annotations

import pytest

from hydria.expand import ExpansionError, expand

VARIABLES = {"HOME": "/home/ada", "UID": "1001", "USER": "ada", "EMPTY": "",
             "XDG_CACHE_HOME": "/home/ada/.cache"}


@pytest.mark.parametrize(("text", "expected"), [
    ("/plain/path", "/plain/path"),
    ("/tmp/hydria-$UID", "/tmp/hydria-1001"),
    ("/tmp/${USER}_data", "/tmp/ada_data"),
    ("${XDG_CACHE_HOME}/hydria", "/home/ada/.cache/hydria"),
    ("${TMPDIR:-/tmp}/x", "/tmp/x"),
    ("${EMPTY:-/fallback}", "/fallback"),
    ("${EMPTY-/kept-empty}", ""),
    ("${MISSING-/unset}", "/unset"),
    ("${TMPDIR:-/scratch/$USER}", "/scratch/ada"),
    ("${TMPDIR:-${HOME}/tmp}/x", "/home/ada/tmp/x"),  # nested, as shells and enroot.conf files write it
    ("${MISSING-${EMPTY:-/a}/${USER}}", "/a/ada"),
    ("${XDG_CACHE_HOME:-${NOPE}}", "/home/ada/.cache"),  # the unused default is not expanded
    ("~/data", "/home/ada/data"),
    ("~", "/home/ada"),
    ("/a~b", "/a~b"),
    ("cost $$5", "cost $5"),
    ("-comp zstd -Xcompression-level 3", "-comp zstd -Xcompression-level 3"),
])
def test_expands(text: str, expected: str) -> None:
    assert expand(text, VARIABLES) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("/scratch/$SLURM_JOB_ID", r"\$SLURM_JOB_ID is not set"),
    ("/x/${NOPE}", r"\$NOPE is not set"),
    ("/tmp/$(id -u)", "command substitution"),
    ("/tmp/$", "stray"),
    ("/tmp/${", "stray"),
    ("${TMPDIR:-${HOME}", "stray"),
])
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(ExpansionError, match=message):
        expand(text, VARIABLES)


def test_a_command_in_a_default_runs_only_when_the_default_is_used() -> None:
    ran = []

    def run(command: str) -> str:
        ran.append(command)
        return "4242\n"
    assert expand("/tmp/${UID:-$(id -u)}", VARIABLES, run) == "/tmp/1001" and ran == []
    assert expand("/tmp/${NOPE:-${EMPTY:-$(id -u)}}", VARIABLES, run) == "/tmp/4242" and ran == ["id -u"]
