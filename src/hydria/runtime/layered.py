"""A layered image: a small text file that names squashfs layer images, which a start stacks
with the container's overlay (runtime/rootfs.py) instead of mounting one merged image.

The file is ``MAGIC`` and then one layer image per line, the lowest first, each a bare file
name in the layered image's own folder (the cache's or a named container's) or in the folder
``LAYER_FOLDER`` beside it (a build's output: the layer images its images there share), so that
a folder of them can be moved or hardlinked as a whole. A layer image holds its layer's tree in the
overlay's format: a deletion is a character device 0/0 and an opaque folder has
``user.overlay.opaque=y`` (image/squash/layer_image.py writes them; docs/architecture.md).

Read by every start (the lean set of docs/runtime.md): no imports beyond ``os``.
"""

from __future__ import annotations

import os

from hydria.paths import open_binary

MAGIC = b"hydria layered image 1\n"
MAX_LAYERS = 500  # the kernel's overlay stacks no more lower layers, nor does the reader serve more
MAX_SIZE = 1 << 20  # far more than MAX_LAYERS names take
LAYER_FOLDER = ".hydria-layers"  # beside a build's outputs (imagebuild/output.py)


class LayeredImageError(Exception):
    """A layered image file that cannot be used: ``str()`` says why."""


def is_layered(head: bytes) -> bool:
    """Whether a file that starts with ``head`` is a layered image."""
    return head.startswith(MAGIC)


def layer_names(text: bytes) -> list[str]:
    """The layer images that ``text`` (a whole layered image file) names, the lowest first.

    Raises:
        LayeredImageError: not one, or a name that is neither a bare file name nor one in
            ``LAYER_FOLDER``.
    """
    if not is_layered(text):
        raise LayeredImageError("it is not a layered image")
    names = text[len(MAGIC):].decode("utf-8", "surrogateescape").splitlines()
    if not names or len(names) > MAX_LAYERS:
        raise LayeredImageError(f"it names {len(names)} layer images (1 to {MAX_LAYERS})")
    for name in names:
        if not _is_file_name(name.removeprefix(f"{LAYER_FOLDER}/")):
            raise LayeredImageError(f"it names {name!r}, which is not a file name of its folder "
                                    f"or of its {LAYER_FOLDER} folder")
    return names


def _is_file_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and "\0" not in name


def layer_paths(path: str) -> list[str]:
    """The layer images of the layered image file ``path``, the lowest first.

    Raises:
        LayeredImageError, OSError.
    """
    with open_binary(path) as handle:
        text = handle.read(MAX_SIZE + 1)
    if len(text) > MAX_SIZE:
        raise LayeredImageError("it is larger than a layered image can be")
    folder = os.path.dirname(os.path.abspath(path))
    return [os.path.join(folder, name) for name in layer_names(text)]


def layered_text(names: list[str]) -> bytes:
    """The content of a layered image file naming ``names`` (as :func:`layer_names` gives them,
    the lowest first)."""
    text = MAGIC + "".join(f"{name}\n" for name in names).encode("utf-8", "surrogateescape")
    layer_names(text)  # the same checks as a reader's
    return text
