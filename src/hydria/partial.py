"""An output written beside its name first (``.NAME.partial.NODE.PID``), then renamed over it, so
that a reader sees the old file or the new one, whole. A process killed in between (kill -9, a
node's out-of-memory killer) cannot remove its partial file: the next write of the same name on
the same node removes those whose process is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydria.liveness import pid_exists
from hydria.paths import hidden_sibling, process_tag
from hydria.trees import delete_tree

_PART = "partial"


def partial_path(target: Path) -> Path:
    """Where this process writes ``target`` before renaming it there. What killed processes of
    this node left at such paths of ``target`` is removed first."""
    mine = target.with_name(hidden_sibling(target.name, _PART, process_tag()))
    node_prefix = mine.name[:mine.name.rindex(".") + 1]  # .NAME.partial.NODE.
    try:
        found = [entry for entry in os.scandir(target.parent) if entry.name.startswith(node_prefix)]
    except OSError:
        return mine
    for entry in found:
        pid = entry.name[len(node_prefix):]
        if not pid.isdigit() or pid_exists(int(pid)):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                delete_tree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # another writer removed it first, or it is not ours to remove (a shared folder)
    return mine
