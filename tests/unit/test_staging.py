"""paths.staging_file: the file a command writes before renaming it over its output, in a
folder that other users may write."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hydria import paths


def test_a_name_someone_made_first_is_never_written_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symlink planted at the staging name (had it been guessed) is passed by, not followed."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    randoms: Iterator[bytes] = iter([b"\x00" * 4, b"\x00" * 4, b"\x01" * 4])
    monkeypatch.setattr(paths.os, "urandom", lambda size: next(randoms))
    target = tmp_path / "out.sqsh"
    planted = tmp_path / f".out.sqsh.exporting.{paths.process_tag()}.00000000"
    planted.symlink_to(victim)
    staging = paths.staging_file(target, "exporting")
    assert staging == tmp_path / f".out.sqsh.exporting.{paths.process_tag()}.01010101"
    info = os.lstat(staging)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == 0
    assert victim.read_text() == "precious" and planted.is_symlink()


def test_the_umask_is_read_without_changing_it() -> None:
    before = os.umask(0o027)
    try:
        assert paths.umask() == 0o027 and paths.umask() == 0o027
    finally:
        os.umask(before)
