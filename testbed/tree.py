"""A comparable description of a file tree: what import must reproduce from the layers."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import NamedTuple


class Node(NamedTuple):
    kind: str  # d, f, l (symlink), p (fifo), c, b
    mode: int
    uid: int
    gid: int
    content: str  # sha256 of a file, target of a symlink, "" otherwise


def snapshot(root: Path) -> tuple[dict[str, Node], set[frozenset[str]]]:
    """Every path under ``root`` (not ``root`` itself) and the groups of hardlinked files."""
    nodes: dict[str, Node] = {}
    inodes: dict[tuple[int, int], list[str]] = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory) / name
            relative = str(path.relative_to(root))
            info = path.lstat()
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                kind, content = "d", ""
            elif stat.S_ISLNK(mode):
                kind, content = "l", os.readlink(path)
            elif stat.S_ISREG(mode):
                kind, content = "f", hashlib.sha256(path.read_bytes()).hexdigest()
                if info.st_nlink > 1:
                    inodes.setdefault((info.st_dev, info.st_ino), []).append(relative)
            else:
                kind, content = ("p" if stat.S_ISFIFO(mode) else "c" if stat.S_ISCHR(mode) else "b"), ""
            nodes[relative] = Node(kind, stat.S_IMODE(mode), info.st_uid, info.st_gid, content)
    groups = {frozenset(paths) for paths in inodes.values() if len(paths) > 1}
    return nodes, groups


def image_listing(images: list[str], option: str = "-l") -> str:
    """``unsquashfs OPTION`` (-l, -lln, ...) of each of the squashfs ``images`` in turn (an image
    file, or a layered image's layer images)."""
    return "".join(subprocess.run(["unsquashfs", option, image], capture_output=True, text=True, check=True).stdout
                   for image in images)
