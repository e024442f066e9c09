"""What a read cache or the store's trees (src/hydria/container/read_cache.py) keep, as tests
look at it: only the entries that have appeared whole. A batch that unpacks an image's first
files does so in ``KEY.unpacking`` and renames it to ``KEY`` when done, so a test that waited for
``*/root/FILE`` could see the staging folder and go on before any start can stack the tree."""

from __future__ import annotations

import time
from pathlib import Path


def entries(folder: Path) -> list[Path]:
    """The kept trees in ``folder`` (``KEY``, each with its ``size``), sorted."""
    return sorted(path for path in folder.glob("*") if "." not in path.name and (path / "size").is_file())


def wait_for_kept_file(folder: Path, name: str, timeout: float = 30) -> list[Path]:
    """The kept copies of the image's file ``name`` (``KEY/root/NAME``), once a whole entry holds
    one, or none after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = [entry / "root" / name for entry in entries(folder) if (entry / "root" / name).exists()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
