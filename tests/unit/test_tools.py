"""Running the field's tools one way (hydria/tools.py): what a failure says."""

from __future__ import annotations

import pytest

from hydria.errors import MissingTool
from hydria.tools import ToolFailed, run_tool


def test_a_missing_program_is_named_with_the_hint() -> None:
    with pytest.raises(MissingTool) as failed:
        run_tool(["hydria-no-such-program", "-v"], "checking", hint="install it")
    assert failed.value.message == "Command not found: hydria-no-such-program"
    assert failed.value.hint == "install it"


def test_a_failing_tool_ends_the_error_with_what_it_said() -> None:
    with pytest.raises(ToolFailed) as failed:
        run_tool(["sh", "-c", "echo out; echo 'bad input' >&2; exit 3"], "cannot convert x")
    assert failed.value.message == "cannot convert x: bad input"
    with pytest.raises(ToolFailed) as silent:
        run_tool(["sh", "-c", "exit 4"], "cannot convert y")
    assert silent.value.message == "cannot convert y: exit status 4"


def test_a_tool_that_succeeds_returns_its_output() -> None:
    assert run_tool(["sh", "-c", "echo made"], "making") == "made\n"
