"""Running hydria as the unprivileged test user, in a workspace of its own."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.users import User
from testbed.workspace import Workspace


def make_workspace(user: User, hydria: str) -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix=f"hydria-ws-{user.name}-"))
    root.chmod(0o755)
    for sub in ("out", "config"):
        (root / sub).mkdir()
    for path in (root, root / "out", root / "config"):
        os.chown(path, user.uid, user.gid)
    yield Workspace(user, root, hydria)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def workspace(test_user: User, hydria_bin: str) -> Iterator[Workspace]:
    yield from make_workspace(test_user, hydria_bin)


@pytest.fixture
def other_workspace(other_user: User, hydria_bin: str) -> Iterator[Workspace]:
    yield from make_workspace(other_user, hydria_bin)
