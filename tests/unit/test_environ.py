"""The container environment: sources, precedence and enroot's normalisation."""

from __future__ import annotations

import pytest

from hydria.errors import HydriaError
from hydria.runtime.edits import Edits, environment_over
from hydria.runtime.environ import build, env_option, parse_env_lines


def test_normalisation() -> None:
    text = '  A=1\n# c\n\nnot a line\nB="two words"\nC=\'q\'\nHYDRIA_X=1\nENROOT_Y=2\n1BAD=x\nD=a=b\n'
    assert parse_env_lines(text) == [("A", "1"), ("B", "two words"), ("C", "q"), ("D", "a=b")]


def test_precedence_and_substitution() -> None:
    host = {"TERM": "xterm", "HOME": "/h", "SECRET": "s"}
    env = build("PATH=/usr/bin\nX=${HOME}/x\nY=image\nW=image\n", ["Y=envd\nZ=${NOPE}z\n"], [("Y", "option")],
                host, conf_output="W=conf\nY=conf\n")
    assert env == {"PATH": "/usr/bin", "X": "/h/x", "Y": "option", "Z": "z", "TERM": "xterm", "W": "conf"}
    assert "SECRET" not in env
    # the hooks' variables (hooks.d scripts' and built-in hooks' edits) come over all but --env's
    environment_over(env, Edits(environment=(("Y", "hook"), ("W", "hook"), ("TERM", "hook"))), kept=["Y"])
    assert (env["Y"], env["W"], env["TERM"]) == ("option", "hook", "hook")


@pytest.mark.parametrize(("value", "expected"), [("A=1", ("A", "1")), ("A", ("A", "host")), ("A=", ("A", "")),
                                                 ("_B=x=y", ("_B", "x=y"))])
def test_env_option(value: str, expected: tuple[str, str]) -> None:
    assert env_option(value, {"A": "host"}) == expected


@pytest.mark.parametrize("value", ["1A=x", "-x", "A-B=1", ""])
def test_bad_env_option(value: str) -> None:
    with pytest.raises(HydriaError, match="Invalid argument") as failed:
        env_option(value, {})
    assert failed.value.hint is not None and failed.value.hint.startswith("--env takes NAME=VALUE")
