"""The layered image file (runtime/layered.py) and what a layer's marker entries delete."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hydria.image.squash.flatten import NOTHING, Deletion, deletion
from hydria.runtime.layered import (
    MAGIC,
    MAX_LAYERS,
    LayeredImageError,
    is_layered,
    layer_names,
    layer_paths,
    layered_text,
)

names = st.text(st.characters(blacklist_characters="/\0\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                              blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(lambda n: n not in (".", ".."))


@given(st.lists(names, min_size=1, max_size=20))
def test_names_come_back_as_written(written: list[str]) -> None:
    assert layer_names(layered_text(written)) == written


@pytest.mark.parametrize("text", [b"", b"hsqs....", MAGIC, MAGIC + b"../x.sqsh\n", MAGIC + b"a/b\n", MAGIC + b"..\n",
                                  MAGIC + b"a\n\nb\n", MAGIC + b"x\n" * (MAX_LAYERS + 1)])
def test_what_is_no_usable_layered_image_is_refused(text: bytes) -> None:
    with pytest.raises(LayeredImageError):
        layer_names(text)


def test_layers_are_found_beside_the_file(tmp_path: Path) -> None:
    (tmp_path / "image.layers").write_bytes(layered_text(["one.sqsh", "two.sqsh"]))
    assert layer_paths(str(tmp_path / "image.layers")) == [str(tmp_path / "one.sqsh"), str(tmp_path / "two.sqsh")]
    assert is_layered(MAGIC + b"x") and not is_layered(b"hsqs" + MAGIC)


@pytest.mark.parametrize(("path", "deleted"), [
    ("a/b", None), (".whx", None), (".wh.x", Deletion("x", False)), ("a/.wh.x", Deletion("a/x", False)),
    ("a/.wh..wh..opq", Deletion("a", True)), (".wh..wh..opq", Deletion("", True)),
    ("a/.wh..wh.plnk", NOTHING), ("a/.wh.", NOTHING),
])
def test_marker_entries(path: str, deleted: Deletion | None) -> None:
    assert deletion(path) == deleted
