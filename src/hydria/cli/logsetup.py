"""How hydria's messages look on standard error: ``[INFO] ...``, ``[WARN] ...``, ``[ERROR] ...``,
written by :mod:`hydria.log` without the ``logging`` package."""

from __future__ import annotations

from hydria.errors import HydriaError
from hydria.interrupt import INTERRUPTED_STATUS, Terminated
from hydria.log import Logger, to_stderr
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

log = Logger("hydria")


def setup_logging() -> None:
    """hydria's messages on standard error, enroot's way."""
    to_stderr()


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
    except Terminated as e:
        return e.status
    except KeyboardInterrupt:
        return INTERRUPTED_STATUS
    except OSError as e:  # a file system error no module anticipated: one line, not a traceback
        log.error("%s", f"{e.strerror}: {e.filename}" if e.strerror and e.filename else e)
        return 1
