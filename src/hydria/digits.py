"""Whole numbers in text that hydria reads from users, the environment, file names and ``/proc``:
ASCII digits only. ``str.isdigit`` also takes characters that ``int`` refuses (``²``), so an
``int`` after it raised where a clear error belonged; ``str.isdecimal`` takes other scripts'
digits (``٣``), which nobody means as a number here.
"""

from __future__ import annotations


def is_number(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits, which ``int`` reads."""
    return text.isascii() and text.isdigit()
