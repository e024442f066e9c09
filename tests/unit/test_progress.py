"""Import progress: live lines on a terminal (cut to its width and height, log lines above them),
log lines otherwise; every phase (downloads with totals and time left, merge, squash). A real
terminal is driven in tests/integration/test_progress_terminal.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from hydria import log
from hydria.image.progress import Progress

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.fixture(autouse=True)
def through_logging() -> Iterator[None]:
    """hydria's messages through ``logging``, as for a program using the API (a test of the command
    line before may have sent them to standard error)."""
    log.to_stderr(None)
    yield
    log.to_stderr(None)
    log.set_live_area(None)


def test_without_terminal_logs_one_line_per_blob_and_the_squash(caplog: pytest.LogCaptureFixture) -> None:
    progress = Progress(live=False)
    with caplog.at_level(logging.INFO, logger="hydria.image.progress"):
        progress.start(DIGEST, 512)
        progress.advance(DIGEST, 512)
        progress.finish(DIGEST)
        progress.squashing()
        progress.merged(3_000_000)
        progress.merge_ended()
        progress.squashed()
    messages = [record.message for record in caplog.records]
    assert len(messages) == 3
    assert "abababababab" in messages[0] and "512 B / 512 B" in messages[0]  # not "0.0 / 0.0 MB"
    assert messages[1] == "Squashing the image..." and messages[2].startswith("Squashed 2.86 MiB in ")


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


def test_a_finished_blob_keeps_its_rate() -> None:
    progress = Progress(live=False)
    progress.start(DIGEST, 1_000_000)
    progress.advance(DIGEST, 1_000_000)
    progress.finish(DIGEST)
    first = progress._lines(200, 50)[0]
    time.sleep(0.2)
    assert progress._lines(200, 50)[0] == first  # the rate no longer falls with the clock


def test_lines_fit_the_terminal() -> None:
    progress = Progress(live=False)
    for index in range(30):
        progress.start(f"sha256:{index:064x}", 10_000_000)
    progress.finish(f"sha256:{0:064x}")
    progress.squashing()
    narrow = progress._lines(44, 12)
    assert all(len(line) < 44 for line in narrow)
    assert len(narrow) <= 12 - 1  # the block never climbs past the top of the screen
    assert narrow[-2].startswith("Downloading 1/30 done") and narrow[-1].startswith("Squashing: ")
    wide = progress._lines(120, 50)
    assert len(wide) == 30 + 2 and all(len(line) < 120 for line in wide)


def test_total_line_has_time_left_while_downloading() -> None:
    progress = Progress(live=False)
    progress.start(DIGEST, 4_000_000)
    progress.start(OTHER, 4_000_000)
    progress.advance(DIGEST, 2_000_000)
    progress._blobs[DIGEST].started -= 1  # 2 MB/s
    total = progress._lines(200, 50)[-1]
    assert total.startswith("Downloading 0/2 done, 1.91 MiB of 7.63 MiB, ") and total.endswith(" left")
    for digest in (DIGEST, OTHER):
        progress.finish(digest)
    assert progress._lines(200, 50)[-1] == "Downloaded 2/2, 1.91 MiB"


def test_live_block_redraws_in_place_and_log_lines_go_above_it(capsys: pytest.CaptureFixture[str]) -> None:
    log.to_stderr()
    progress = Progress(live=True)
    progress.start(DIGEST, 1_000_000)
    progress.start(OTHER, -1)
    log.Logger("hydria").info("Downloading 2 missing layers...")
    progress.finish(DIGEST)
    progress.close()
    err = capsys.readouterr().err
    # Each draw climbs over the lines it drew before and clears to the end of the screen; the
    # log line is written after the block was erased, so the next draw does not overwrite it.
    before, after = err.split("[INFO] Downloading 2 missing layers...\n")
    assert before.endswith("\x1b[3F\x1b[J") and after.startswith("\x1b[J")
    last = err.rsplit("\x1b[J", 1)[1].splitlines()
    assert last[0].startswith("abababababab  done  ") and last[1].startswith("cdcdcdcdcdcd  ...  ")
    assert last[2].startswith("Downloading 1/2")
    assert log._live_area is None  # closed: later messages are written plainly


def test_finish_of_a_blob_someone_else_downloaded_is_ignored() -> None:
    Progress(live=False).finish(DIGEST)
