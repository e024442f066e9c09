"""SIGTERM (scancel of a Slurm step, kill) handled as Ctrl-C: Python raises KeyboardInterrupt,
so that ``finally`` blocks remove what was half-written and the tools a command runs are ended
with it, instead of Python dying mid-write and leaving both behind."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

TERMINATED_STATUS = 143  # 128 + SIGTERM: what shells and schedulers read as "terminated"
INTERRUPTED_STATUS = 130  # 128 + SIGINT: Ctrl-C


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python raises KeyboardInterrupt for Ctrl-C, so that the same cleanup
    runs, and told apart by its exit status."""


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Only in the main thread, where Python runs signal handlers; the previous handler after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
