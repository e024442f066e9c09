"""How the read cache's unpacker names files to unsquashfs and moves a batch into a tree
(container/unpack_behind.py); the whole path runs in tests/integration/test_read_cache.py."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from hydria.container.read_cache import ReadCache, kept_tree, lock, restore_times
from hydria.container.unpack_behind import _literal, _move_into, _note_times

# How unsquashfs matches each line of its -ef file against a name: glibc's fnmatch with these flags.
FNM_PATHNAME, FNM_PERIOD, FNM_EXTMATCH = 1, 4, 32


def unsquashfs_matches(pattern: bytes, name: bytes) -> bool:
    fnmatch = ctypes.CDLL(None).fnmatch
    return fnmatch(pattern, name, FNM_PATHNAME | FNM_PERIOD | FNM_EXTMATCH) == 0


@pytest.mark.parametrize("name", [b"plain", b"a*b", b"x[1]", b"q?", b"back\\slash", b"+(ext)", b"@(a|b)", b"!(x)",
                                  b"[!a]", b"*(y)"])
def test_a_name_given_to_unsquashfs_matches_only_itself(name: bytes) -> None:
    pattern = _literal(name)
    assert unsquashfs_matches(pattern, name)
    others = (b"plain-other", b"aXb", b"x1", b"qq", b"a", b"b", b"ext", b"x", b"y", b"", b"back\\\\slash")
    assert not any(unsquashfs_matches(pattern, other) for other in others if other != name)


def test_a_batch_moves_in_what_the_tree_lacks_and_keeps_the_folders_times(tmp_path: Path) -> None:
    tree, staged = tmp_path / "tree", tmp_path / "staged"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "kept").write_text("old\n")
    for path, text in (("etc/kept", "never moved over the kept one\n"), ("etc/new", "new\n"), ("opt/a/b", "deep\n")):
        (staged / path).parent.mkdir(parents=True, exist_ok=True)
        (staged / path).write_text(text)
    os.link(staged / "etc" / "new", staged / "etc" / "new-link")
    for folder in (staged / "etc", staged / "opt", staged):
        os.utime(folder, ns=(1_000_000_000, 1_000_000_000))

    gained = _move_into(str(staged), str(tree))

    assert (tree / "etc" / "kept").read_text() == "old\n"
    assert (tree / "etc" / "new").read_text() == "new\n" and (tree / "opt" / "a" / "b").read_text() == "deep\n"
    assert os.path.samefile(tree / "etc" / "new", tree / "etc" / "new-link"), "hard links stay one file"
    assert gained >= (tree / "etc" / "new").stat().st_blocks * 512 + (tree / "opt" / "a" / "b").stat().st_blocks * 512
    assert (tree / "etc").stat().st_mtime_ns == 1_000_000_000, "a folder that gained files keeps the image's time"
    assert tree.stat().st_mtime_ns == 1_000_000_000


def test_the_times_a_batch_killed_amid_its_moves_changed_are_restored(tmp_path: Path) -> None:
    cache = ReadCache(str(tmp_path), 1 << 30)
    entry = tmp_path / "KEY"
    tree, staged = entry / "root", tmp_path / "KEY.unpacking" / "root"
    (tree / "etc").mkdir(parents=True)
    (staged / "etc").mkdir(parents=True)
    (staged / "etc" / "new").write_text("new\n")
    for folder in (staged / "etc", staged):
        os.utime(folder, ns=(2_000_000_000, 1_000_000_000))
    _note_times(str(entry), str(staged), str(tree))
    os.rename(staged / "etc" / "new", tree / "etc" / "new")  # the move; then the kill, before the times
    assert (tree / "etc").stat().st_mtime_ns != 1_000_000_000
    restore_times(cache, "KEY")
    assert (tree / "etc").stat().st_mtime_ns == tree.stat().st_mtime_ns == 1_000_000_000
    assert not (tmp_path / "KEY.times").exists()


def test_a_start_leaves_the_times_of_a_batch_at_work_to_it(tmp_path: Path) -> None:
    """A start restores what a killed batch left, never the record of a batch that holds the
    lock: that batch sets the times itself and then removes its record."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    cache = ReadCache(str(folder), 1 << 30)
    (folder / "KEY" / "root" / "etc").mkdir(parents=True)
    (folder / "KEY" / "size").write_text("0\n")
    (folder / "KEY.times").write_text("2000000000 1000000000 etc\0")
    held = lock(cache, "KEY")
    assert held is not None
    try:
        assert kept_tree(cache, "KEY") == str(folder / "KEY" / "root")
        assert (folder / "KEY.times").exists() and (folder / "KEY" / "root" / "etc").stat().st_mtime_ns != 1_000_000_000
    finally:
        os.close(held)
    kept_tree(cache, "KEY")  # the batch was killed: its record is the start's to apply
    assert not (folder / "KEY.times").exists()
    assert (folder / "KEY" / "root" / "etc").stat().st_mtime_ns == 1_000_000_000


def test_the_names_read_are_taken_line_by_line_across_chunks_and_nothing_else() -> None:
    """The read log's lines, and what a step passes to the store's keeper (which a user may write
    anything to): two ASCII numbers a line, however the chunks cut them; anything else is skipped,
    and a line longer than two numbers is skipped however long it grows."""
    from hydria.container.unpack_behind import read_batches

    chunks = [b"0 12\n1 3", b"4\n", b"", b"x 5\n\xd9\xa3 6\n2 -1\n1 18446744073709551616\n", b"9" * 10**6,
              b"9" * 10**6, b"3 7\n4 8\n"]
    assert list(read_batches(iter(chunks))) == [{(0, 12)}, {(1, 34)}, {(4, 8)}]
