"""How hydria's messages look on standard error: ``[INFO] ...``, ``[WARN] ...``, ``[ERROR] ...``.

The ``logging`` set-up waits for the first message (:mod:`hydria.log`): most commands, and every
container start that goes well, write none.
"""

from __future__ import annotations

from collections.abc import Callable

from hydria.errors import HydriaError
from hydria.log import Logger, when_used

log = Logger("hydria")
_TAGS = {10: "DEBUG", 20: "INFO", 30: "WARN", 40: "ERROR"}


def setup_logging() -> None:
    """hydria's messages on standard error, enroot's way (once per process, at the first one)."""
    when_used(_install_handler)


def _install_handler() -> None:
    import logging
    import sys

    class LevelFormatter(logging.Formatter):
        """enroot's stderr style."""

        def format(self, record: logging.LogRecord) -> str:
            return f"[{_TAGS.get(record.levelno, record.levelname)}] {record.getMessage()}"

    class StderrHandler(logging.Handler):
        """Writes to whatever ``sys.stderr`` is at the time of each message, not at setup."""

        def emit(self, record: logging.LogRecord) -> None:
            try:
                sys.stderr.write(self.format(record) + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                self.handleError(record)

    root = logging.getLogger("hydria")
    if root.handlers:
        return
    handler = StderrHandler()
    handler.setFormatter(LevelFormatter())
    root.addHandler(handler)
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    root.propagate = False


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
