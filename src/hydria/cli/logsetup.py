"""How hydria's messages look on standard error: ``[INFO] ...``, ``[WARN] ...``, ``[ERROR] ...``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import ClassVar

from hydria.errors import HydriaError

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


def report(error: HydriaError) -> int:
    """Log ``error`` and its hint; returns its exit status."""
    log.error("%s", error.message)
    if error.hint:
        log.info("hint: %s", error.hint)
    return error.exit_code


def guarded(action: Callable[[], int]) -> int:
    """Run a command's action: its errors become one logged line and an exit status."""
    try:
        return action()
    except HydriaError as e:
        return report(e)
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # a file system error no module anticipated: one line, not a traceback
        log.error("%s", f"{e.strerror}: {e.filename}" if e.strerror and e.filename else e)
        return 1
