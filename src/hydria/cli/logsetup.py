"""How hydria's messages look on standard error: ``[INFO] ...``, ``[WARN] ...``, ``[ERROR] ...``."""

from __future__ import annotations

import logging
import sys
from typing import ClassVar

log = logging.getLogger("hydria")


class _LevelFormatter(logging.Formatter):
    """enroot's stderr style: ``[INFO] ...``, ``[WARN] ...``, ``[ERROR] ...``."""

    _TAGS: ClassVar[dict[int, str]] = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR"}

    def format(self, record: logging.LogRecord) -> str:
        return f"[{self._TAGS.get(record.levelno, record.levelname)}] {record.getMessage()}"


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of each message, not at setup."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            self.handleError(record)


def setup_logging() -> None:
    """hydria's messages on standard error, enroot's way (once per process)."""
    if log.handlers:
        return
    handler = _StderrHandler()
    handler.setFormatter(_LevelFormatter())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
