"""Sizes: one parser for what users write (settings, ``--to``, squash options' block size) and one
formatter for what hydria prints (``info``, ``doctor``, ``cache``, ``store``, progress).

Both are binary: K, M, G and T are powers of 1024 in what is read (as enroot's settings and
mksquashfs's ``-b`` read them), and KiB, MiB, GiB and TiB are written, so that a size a user sets
(``HYDRIA_CACHE_LIMIT=40G``) is printed as the same number (``40.0 GiB``).
"""

from __future__ import annotations

import math

_FACTORS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_NAMES = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
SIZE_HINT = "a number of bytes, or with K, M, G or T (powers of 1024), e.g. 500G"


def parse_size(text: str) -> int | None:
    """Bytes in ``text`` ("500G", "1.5T", "2GiB", "10 M", "4096"), or None where it is no size."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    factor = 1
    if text[-1:] in _FACTORS:
        factor, text = _FACTORS[text[-1]], text[:-1]
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value * factor) if math.isfinite(value) and value >= 0 else None


def setting_size(count: int) -> str:
    """``count`` bytes as a setting is written, exactly and shortest: 40G, 1536M, 4096."""
    for letter, size in sorted(_FACTORS.items(), key=lambda pair: -pair[1]):
        if count and count % size == 0:
            return f"{count // size}{letter}"
    return str(count)


def format_size(count: float) -> str:
    """``count`` bytes in the unit that suits it: 512 B, 12.3 KiB, 45.6 MiB, 1.23 GiB, 40.0 GiB."""
    for name, size in _NAMES:
        if count >= size:
            value = count / size
            return f"{value:.2f} {name}" if value < 10 else f"{value:.1f} {name}"
    return f"{int(count)} B"
