"""Walking and deleting trees of any depth and shape (hydria/trees.py)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.trees import delete_tree, walk

DEPTH = 10_000  # what a crafted layer holds in a few hundred kilobytes; far past PATH_MAX and Python's stack


def deep_tree(top: Path, depth: int = DEPTH) -> None:
    """``top/d/d/.../d`` ``depth`` levels down, made through descriptors (the path is too long for
    the system), with a file and a link at the bottom."""
    top.mkdir()
    current = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=current)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
        os.close(current)
        current = below
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=current), "w") as handle:
        handle.write("bottom\n")
    os.symlink("/", "root-link", dir_fd=current)
    os.close(current)


def test_walk_and_delete_a_tree_deeper_than_the_stack_and_path_max(tmp_path: Path) -> None:
    top = tmp_path / "deep"
    deep_tree(top)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # nothing here may recurse per level
    try:
        seen = sum(1 for _ in walk(top))  # below PATH_MAX: every folder a path can name
        delete_tree(top)
    finally:
        sys.setrecursionlimit(limit)
    assert 1000 < seen < DEPTH  # the rest is past PATH_MAX, skipped as os.walk skips it
    assert not top.exists() and os.path.isdir("/")


def test_delete_tree_removes_links_and_never_follows_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("kept\n")
    outside.chmod(0o500)  # a followed link would chmod it
    top = tmp_path / "tree"
    (top / "locked" / "inner").mkdir(parents=True)
    (top / "locked" / "inner" / "file").write_text("x")
    (top / "locked" / "to-outside").symlink_to(outside)
    (top / "locked").chmod(0)
    delete_tree(top)
    assert not top.exists()
    assert (outside / "kept").read_text() == "kept\n" and stat.S_IMODE(outside.stat().st_mode) == 0o500
    outside.chmod(0o700)


# A tree shape: a folder maps names to a sub-folder (a dict) or to a file's content (a string).
NAMES = st.text(alphabet="abcxyz-_.0", min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))
TREES = st.recursive(st.dictionaries(NAMES, st.text(max_size=3), max_size=3),
                     lambda children: st.dictionaries(NAMES, children, max_size=4), max_leaves=30)


def build(folder: Path, shape: dict[str, object]) -> None:
    folder.mkdir()
    for name, child in shape.items():
        if isinstance(child, dict):
            build(folder / name, child)
        else:
            (folder / name).write_text(str(child))


@settings(max_examples=60, deadline=None)
@given(TREES)
def test_walk_lists_what_os_walk_lists_and_delete_tree_leaves_nothing(shape: dict[str, object]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        top = Path(scratch) / "top"
        build(top, shape)
        (top / "link").symlink_to(scratch)  # a link to a folder is a file to both walks
        ours = sorted((d, sorted(f), sorted(n)) for d, f, n in walk(top))
        theirs = sorted((d, sorted(f), sorted(n)) for d, f, n in os.walk(top))
        assert ours == theirs
        delete_tree(top)
        assert os.listdir(scratch) == []
