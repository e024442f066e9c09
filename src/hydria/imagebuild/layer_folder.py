"""The layer images of a folder's layered outputs (``hydria build -t NAME`` with
``HYDRIA_LAYERED_IMAGES``): a layered image file where the user asked for the image, naming
layer images in the folder ``LAYER_FOLDER`` beside it (runtime/layered.py), which every layered
image of that folder shares. Each layer image is linked from the image cache (a copy where the
folder is on another file system), so a rebuild adds only its changed steps' layer images.

A layer image that no layered image of the folder names any longer goes when an output is
written there; a lock (``LAYER_FOLDER/.lock``: shared while an output is written, exclusive to
collect) keeps a collection from taking the layers of an output being written. A container
started from an image keeps its layer images open, so replacing the image does not disturb it.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydria import locks
from hydria.anonfile import link_or_copy
from hydria.errors import HydriaError
from hydria.partial import partial_path
from hydria.runtime.layered import (
    LAYER_FOLDER,
    MAGIC,
    MAX_SIZE,
    LayeredImageError,
    layer_names,
    layer_paths,
    layered_text,
)

LOCK = ".lock"


def publish_layered(entry: Path, target: Path) -> None:
    """Make ``target`` the layered image ``entry`` (the image cache's): its layer images linked
    into ``LAYER_FOLDER`` beside ``target``, then ``target`` written (replacing one that is
    there) naming them. Raises HydriaError, OSError."""
    folder = _layer_folder(target.parent)
    layers = layer_paths(str(entry))
    with locks.held(folder / LOCK, shared=True, mode=0o644):
        for layer in dict.fromkeys(layers):
            try:
                link_or_copy(layer, folder / os.path.basename(layer))
            except FileExistsError:
                pass  # the same layer (a name is its content's key), from an earlier output
        partial = partial_path(target)
        try:
            partial.write_bytes(layered_text([f"{LAYER_FOLDER}/{os.path.basename(layer)}" for layer in layers]))
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    collect(target.parent)


def collect(parent: Path) -> None:
    """Remove the layer images of ``parent``'s ``LAYER_FOLDER`` that no layered image in
    ``parent`` names, unless an output is being written there."""
    folder = parent / LAYER_FOLDER
    with locks.held(folder / LOCK, timeout=0, mode=0o644) as alone:
        if not alone:
            return  # another build writes an output here: its collection comes later
        named = _named_layers(parent)
        if named is None:
            return
        for path in folder.iterdir():
            if path.name != LOCK and path.name not in named:
                path.unlink(missing_ok=True)


def _layer_folder(parent: Path) -> Path:
    folder = parent / LAYER_FOLDER
    try:
        folder.mkdir(mode=0o755, exist_ok=True)
    except OSError as e:
        raise HydriaError(f"cannot make {folder}: {e.strerror}", hint="write the image to a folder of yours") from None
    if folder.is_symlink() or not folder.is_dir():
        raise HydriaError(f"{folder} is not a folder: it keeps the layer images of layered images there",
                          hint="remove it, or write the image elsewhere (-o IMAGE.sqsh writes one file)")
    return folder


def _named_layers(parent: Path) -> set[str] | None:
    """The names in ``LAYER_FOLDER`` that the layered images in ``parent`` name; None where a
    file there cannot be read (it may be one: nothing is collected)."""
    named: set[str] = set()
    for path in parent.iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        try:
            with open(path, "rb") as handle:
                if handle.read(len(MAGIC)) != MAGIC:
                    continue
                names = layer_names(MAGIC + handle.read(MAX_SIZE))
        except LayeredImageError:
            continue
        except OSError:
            return None
        named.update(name.removeprefix(f"{LAYER_FOLDER}/") for name in names if name.startswith(f"{LAYER_FOLDER}/"))
    return named
