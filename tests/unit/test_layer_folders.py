"""Which of an image's WORKDIR and VOLUME folders a layered image's top layer adds, from what the
reader found at each part of their paths (image/squash/missing_folders.py); the real reader's answers are
checked by tests/integration/test_layered_images.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hydria.image.squash import missing_folders as layer_folders
from hydria.image.squash.flatten import ExtraFile
from hydria.image.squash.layer_image import LayerNeedsMerge


def _reader_answering(tmp_path: Path, answer: str, status: int = 0) -> str:
    """A stand-in for the reader that prints ``answer`` (the reader's own protocol is tested with
    the real one in the integration tests)."""
    script = tmp_path / "reader"
    script.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '{answer}'\nexit {status}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_missing_folders_and_the_folders_on_their_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader_answering(tmp_path, "d 750 5 6 100;-\\n-\\nd 755 0 0 1\\nx\\nd 755 0 0 1;x\\n")
    monkeypatch.setattr(layer_folders, "installed_reader", lambda: reader)
    found = layer_folders.missing_folders(["l1.sqsh"], ["/opt/app/run/", "new/dir", "/opt", "/link/sub", "/opt/f/x",
                                                        "/", "./new/dir"])
    assert found == [ExtraFile("new", None, 0o755), ExtraFile("new/dir", None, 0o755),
                     ExtraFile("opt", None, 0o750, 5, 6, 100), ExtraFile("opt/app", None, 0o755),
                     ExtraFile("opt/app/run", None, 0o755)]


def test_no_folder_to_ask_about_needs_no_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_folders, "installed_reader", lambda: None)
    assert layer_folders.missing_folders(["l1.sqsh"], ["/", "."]) == []


def test_without_the_reader_the_image_is_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_folders, "installed_reader", lambda: None)
    with pytest.raises(LayerNeedsMerge, match="hydria install-reader"):
        layer_folders.missing_folders(["l1.sqsh"], ["/workspace"])


@pytest.mark.parametrize("answer, status", [("", 1), ("d 755 0 0 1\\n", 0)])
def test_a_reader_that_fails_or_answers_short_merges_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                answer: str, status: int) -> None:
    reader = _reader_answering(tmp_path, answer, status)
    monkeypatch.setattr(layer_folders, "installed_reader", lambda: reader)
    with pytest.raises(LayerNeedsMerge, match="cannot find which WORKDIR"):
        layer_folders.missing_folders([os.devnull], ["/a", "/b"])


def test_a_reader_older_than_the_question_says_to_build_it_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader_answering(tmp_path, "usage: hydria-squashfuse ...", layer_folders.USAGE_STATUS)
    monkeypatch.setattr(layer_folders, "installed_reader", lambda: reader)
    with pytest.raises(LayerNeedsMerge, match="hydria install-reader builds it again"):
        layer_folders.missing_folders([os.devnull], ["/a"])
