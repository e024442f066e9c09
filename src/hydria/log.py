"""hydria's loggers.

The standard ``logging`` package's imports would cost every container start (docs/runtime.md). So the command line
writes hydria's messages itself, enroot's way (``[INFO] ...`` on standard error: :func:`to_stderr`),
and no command imports ``logging`` for them; a program using :mod:`hydria.api` gets ordinary
``logging`` loggers instead (looked up at the first message) and configures them the standard way.
"""

from __future__ import annotations

import sys

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import logging
    from typing import Any

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
_TAGS = {DEBUG: "DEBUG", INFO: "INFO", WARNING: "WARN", ERROR: "ERROR"}
_COLOURS = {DEBUG: "\x1b[2m", INFO: "\x1b[94m", WARNING: "\x1b[33m", ERROR: "\x1b[31m"}  # dim, blue, yellow, red
_stderr_level: int | None = None  # set by the command line: messages go straight to standard error
_live_area: Any = None  # a block of live lines at the bottom of the terminal (image/progress.py)


def set_live_area(area: Any) -> None:
    """While ``area`` (with ``erase()`` and ``redraw()``) is drawn at the bottom of the terminal,
    a message erases it, is written, and draws it again below; None: no such block."""
    global _live_area
    _live_area = area


def to_stderr(level: int | None = INFO) -> None:
    """Write messages of ``level`` and above as ``[TAG] message`` lines on standard error (whatever
    ``sys.stderr`` is at the time of each), not through ``logging``; None: through ``logging``."""
    global _stderr_level
    _stderr_level = level


class Logger:
    """A ``logging.Logger`` by name, looked up when first needed, or the command line's writer."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    @property
    def logger(self) -> logging.Logger:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self.name)
        return self._logger

    def enabled_for(self, level: int) -> bool:
        return level >= _stderr_level if _stderr_level is not None else self.logger.isEnabledFor(level)

    def debug(self, message: str, *args: Any) -> None:
        self._write(DEBUG, message, args)

    def info(self, message: str, *args: Any) -> None:
        self._write(INFO, message, args)

    def warning(self, message: str, *args: Any) -> None:
        self._write(WARNING, message, args)

    def error(self, message: str, *args: Any) -> None:
        self._write(ERROR, message, args)

    def warning_with_hint(self, hint: str, message: str, *args: Any) -> None:
        """A warning and, on a line of its own, what to do about it (``[INFO] hint: ...``), as an
        error's hint is printed (cli/logsetup.py)."""
        self._write(WARNING, message, args)
        self._write(INFO, "hint: %s", (hint,))

    def _write(self, level: int, message: str, args: tuple[Any, ...]) -> None:
        if _stderr_level is None:
            self.logger.log(level, message, *args)
        elif level >= _stderr_level:
            try:
                tag = f"[{_TAGS[level]}]"
                if _coloured():
                    tag = f"{_COLOURS[level]}{tag}\x1b[0m"
                area = _live_area
                if area is not None:
                    area.erase()
                sys.stderr.write(f"{tag} {message % args if args else message}\n")
                sys.stderr.flush()
                if area is not None:
                    area.redraw()
            except (OSError, ValueError):
                pass  # standard error is closed: nowhere to say it


def _coloured() -> bool:
    """Colour the tags on a terminal, unless NO_COLOR (no-color.org) or TERM=dumb says not to."""
    import os

    return sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
