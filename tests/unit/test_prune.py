"""Choosing what pruning removes: least recently used first, down to the target, never what is
mounted on this node or was used within the grace period."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hydria.image.kept.prune import Item, victims

NOW = time.time()
DAY = 86400.0


def items() -> list[Item]:
    return [Item(Path("/s/recent"), 100, NOW - 60), Item(Path("/s/old"), 100, NOW - 3 * DAY),
            Item(Path("/s/older"), 100, NOW - 5 * DAY), Item(Path("/s/mounted"), 100, NOW - 9 * DAY)]


def names(chosen: list[Item]) -> list[str]:
    return [item.path.name for item in chosen]


@pytest.mark.parametrize(("target", "expected"), [
    (400, []),  # nothing to do
    (300, ["older"]),  # the least recently used that may go
    (150, ["older", "old"]),
    (0, ["older", "old"]),  # as near as the others allow: recent and mounted stay
])
def test_least_recently_used_first_and_never_in_use(target: int, expected: list[str]) -> None:
    assert names(victims(items(), target, DAY, mounted=lambda: {"/s/mounted"})) == expected
