"""Walking and deleting directory trees without recursion.

Images may hold trees of any depth (a layer of 10,000 nested directories is a few hundred
kilobytes). Python's ``os.walk`` before 3.12 and ``shutil.rmtree`` recurse once per level and end
in RecursionError past about 1,000, and path-based calls fail past the system's PATH_MAX (4,096
bytes) with "File name too long". So the walk keeps its own stack, and the deletion works one
directory at a time through descriptors, holding two at most, its memory linear in the depth.
"""

from __future__ import annotations

import os
import stat

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top)`` (top-down; links to folders listed among the folders but not entered;
    the caller may prune the folder names it is given), without recursion. Folders that cannot
    be read (permissions, a path past PATH_MAX) are skipped, as ``os.walk`` skips them."""
    pending = [os.fspath(top)]
    while pending:
        directory = pending.pop()
        folders: list[str] = []
        files: list[str] = []
        links = set()  # links to folders: listed as folders (as os.walk lists them), never entered
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    (folders if _is_folder(entry) else files).append(entry.name)
                    if entry.is_symlink():
                        links.add(entry.name)
        except OSError:
            continue
        yield directory, folders, files
        pending.extend(os.path.join(directory, name) for name in reversed(folders) if name not in links)


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def delete_tree(path: str | Path) -> None:
    """Delete the tree at ``path``, first giving its owner access to each directory (overlay work
    directories and images hold directories without owner permissions). Links are removed, never
    followed. Raises OSError."""
    os.chmod(path, stat.S_IRWXU)
    current = os.open(path, _DIRECTORY)
    below: list[str] = []  # the names from ``path`` down to ``current``
    try:
        while True:
            child = _first_subdirectory_after_emptying(current)
            if child is not None:
                try:  # a directory: opened below without following links
                    os.chmod(child, stat.S_IRWXU, dir_fd=current)
                except PermissionError:
                    pass  # not ours to change: open it as it is
                descended = os.open(child, _DIRECTORY, dir_fd=current)
                os.close(current)
                current = descended
                below.append(child)
                continue
            if not below:
                break
            parent = os.open("..", _DIRECTORY, dir_fd=current)
            os.close(current)
            current = parent
            os.rmdir(below.pop(), dir_fd=current)
    finally:
        os.close(current)
    os.rmdir(path)


def _first_subdirectory_after_emptying(directory: int) -> str | None:
    """Unlink every non-directory in ``directory`` until a subdirectory is met; its name, or
    None when ``directory`` is empty now."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            os.unlink(entry.name, dir_fd=directory)
    return None

