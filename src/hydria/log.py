"""hydria's loggers, made on first use.

The standard ``logging`` package costs every container start ~10 ms of imports, and a start that
goes well logs nothing, so modules hold a :class:`Logger` that imports ``logging`` only when a
message is written (or the real logger is asked for). Messages then go through ``logging`` as
usual: a program using :mod:`hydria.api` configures them the standard way.
"""

from __future__ import annotations

from collections.abc import Callable

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import logging
    from typing import Any

_pending: list[Callable[[], None]] = []
_in_use = False


def when_used(action: Callable[[], None]) -> None:
    """Run ``action`` (a ``logging`` set-up) before the first message of any of these loggers, or
    now when one is in use already."""
    if _in_use:
        action()
    else:
        _pending.append(action)


class Logger:
    """A ``logging.Logger`` by name, looked up when first needed."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    @property
    def logger(self) -> logging.Logger:
        global _in_use
        if self._logger is None:
            import logging

            _in_use = True
            while _pending:
                _pending.pop(0)()
            self._logger = logging.getLogger(self.name)
        return self._logger

    def debug(self, message: str, *args: Any) -> None:
        self.logger.debug(message, *args)

    def info(self, message: str, *args: Any) -> None:
        self.logger.info(message, *args)

    def warning(self, message: str, *args: Any) -> None:
        self.logger.warning(message, *args)

    def error(self, message: str, *args: Any) -> None:
        self.logger.error(message, *args)
