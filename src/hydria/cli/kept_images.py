"""What ``hydria cache`` and ``hydria store`` share: kept images shown as one table (one row a
kept image, sizes in binary units) or as JSON, and the sizes their ``--to`` takes."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from hydria.image.kept.interface import LAYERED_SUFFIX, KeptImage
from hydria.units import SIZE_HINT, format_size, parse_size

COLUMNS = ("KEY", "SIZE", "LAST USED", "FORM", "IMAGE")


def size_argument(text: str) -> int:
    """A size option's value (``--to``). Raises argparse.ArgumentTypeError."""
    size = parse_size(text)
    if size is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} ({SIZE_HINT})")
    return size


def table(images: Sequence[KeptImage]) -> list[str]:
    """The lines of the table, a header first; nothing when there are none."""
    if not images:
        return []
    rows = [COLUMNS, *((image.key[:12], format_size(image.size), _when(image.used), _form(image),
                        image.uri or "(not recorded)") for image in images)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]) for row in rows]


def as_json(images: Sequence[KeptImage]) -> list[dict[str, object]]:
    return [{"key": image.key, "path": str(image.path), "size": image.size, "uri": image.uri, "digest": image.digest,
             "created": image.created, "used": image.used, "layered": image.path.name.endswith(LAYERED_SUFFIX)}
            for image in images]


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _form(image: KeptImage) -> str:
    return "layered" if image.path.name.endswith(LAYERED_SUFFIX) else "file"
