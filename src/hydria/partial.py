"""An output written beside its name first (``.NAME.partial.NODE.PID``), then renamed over it, so
that a reader sees the old file or the new one, whole. A process killed in between (kill -9, a
node's out-of-memory killer) cannot remove its partial file: the next write of the same name on
the same node removes those whose process is gone (:func:`remove_dead_leftovers`, which named
containers' staging and trash folders use too).
"""

from __future__ import annotations

import os
from pathlib import Path

from hydria.digits import is_number
from hydria.liveness import pid_exists
from hydria.paths import hidden_sibling, process_tag
from hydria.record import TYPE_CHECKING
from hydria.trees import delete_tree

if TYPE_CHECKING:
    from collections.abc import Callable

_PART = "partial"


def partial_path(target: Path) -> Path:
    """Where this process writes ``target`` before renaming it there. What killed processes of
    this node left at such paths of ``target`` is removed first."""
    mine = target.with_name(hidden_sibling(target.name, _PART, process_tag()))
    node_prefix = mine.name[:mine.name.rindex(".") + 1]  # .NAME.partial.NODE.

    def pid_of(name: str) -> int | None:
        pid = name[len(node_prefix):]
        return int(pid) if name.startswith(node_prefix) and is_number(pid) else None

    remove_dead_leftovers(target.parent, pid_of)
    return mine


def remove_dead_leftovers(folder: Path, pid_of: Callable[[str], int | None]) -> None:
    """Remove the files and folders in ``folder`` that processes of this node left when they were
    killed: those whose name ``pid_of`` finds the PID of a process in, one that is gone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        pid = pid_of(entry.name)
        if pid is None or pid_exists(pid):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                delete_tree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # another writer removed it first, or it is not ours to remove (a shared folder)
