"""Download progress: live lines on a terminal, one log line per layer otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from hydria import log
from hydria.image.progress import Progress

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def through_logging() -> Iterator[None]:
    """hydria's messages through ``logging``, as for a program using the API (a test of the command
    line before may have sent them to standard error)."""
    log.to_stderr(None)
    yield
    log.to_stderr(None)


def test_without_terminal_logs_one_line_per_finished_layer(caplog: pytest.LogCaptureFixture) -> None:
    progress = Progress(live=False)
    with caplog.at_level(logging.INFO, logger="hydria.image.progress"):
        progress.start(DIGEST, 3_000_000)
        progress.advance(DIGEST, 3_000_000)
        progress.finish(DIGEST)
    assert len(caplog.records) == 1
    assert "abababababab" in caplog.records[0].message and "3.0 /      3.0 MB" in caplog.records[0].message


def test_the_command_line_writes_the_line_itself(capsys: pytest.CaptureFixture[str]) -> None:
    log.to_stderr()
    progress = Progress(live=False)
    progress.start(DIGEST, 3_000_000)
    progress.finish(DIGEST)
    assert capsys.readouterr().err.startswith("[INFO] abababababab ")
    log.to_stderr(log.WARNING)  # import --quiet
    quiet = Progress(live=False)
    quiet.start(DIGEST, 1)
    quiet.finish(DIGEST)
    assert capsys.readouterr().err == ""


def test_live_redraws_in_place(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(live=True)
    progress.start(DIGEST, 1_000_000)
    progress.start("sha256:" + "cd" * 32, -1)
    progress.finish(DIGEST)
    err = capsys.readouterr().err
    assert err.count("\x1b[2K") == 1 + 2 + 2  # each draw rewrites every line
    assert "\x1b[1F" in err and "\x1b[2F" in err
    first, second = err.split("\x1b[2F")[-1].splitlines()
    assert first.endswith("done") and second.endswith("downloading") and "?" in second


def test_finish_of_a_layer_someone_else_downloaded_is_ignored() -> None:
    Progress(live=False).finish(DIGEST)
