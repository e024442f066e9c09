"""Hidden siblings (staging, trash and partial names beside a file or folder) fit a file name
whenever the name they stand beside does, whatever the host name (hydria.paths.hidden_sibling)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hydria.paths import NAME_MAX, hidden_sibling

NAMES = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1).filter(
    lambda name: len(name.encode()) <= NAME_MAX)
HOST_NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=64)  # HOST_NAME_MAX


@given(name=NAMES, host=HOST_NAMES, pid=st.integers(1, 4194304), ns=st.integers(0, 2**64 - 1))
def test_every_sibling_fits(name: str, host: str, pid: int, ns: int) -> None:
    tag = f"{host}.{pid}"
    for parts in (("creating", tag), ("removing", tag, str(ns)), ("loading", tag, "sqsh"),
                  (tag, "f" * 16, "partial"), ("exporting", tag, "ffffffff")):
        sibling = hidden_sibling(name, *parts)
        assert len(sibling.encode()) <= NAME_MAX and sibling.startswith(".") and sibling.endswith(parts[-1])


@given(first=NAMES, second=NAMES)
def test_long_names_stand_for_themselves(first: str, second: str) -> None:
    """Two names give two siblings: a digest, not a cut, stands for a long name."""
    if first != second:
        assert hidden_sibling(first, "creating") != hidden_sibling(second, "creating")


def test_short_names_are_kept_readable() -> None:
    assert hidden_sibling("pytorch", "creating", "node1.42") == ".pytorch.creating.node1.42"
