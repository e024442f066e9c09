"""SIGTERM (scancel of a Slurm step, kill) handled as Ctrl-C: Python raises KeyboardInterrupt,
so that ``finally`` blocks remove what was half-written and the tools a command runs are ended
with it, instead of Python dying mid-write and leaving both behind."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Only in the main thread, where Python runs signal handlers; the previous handler after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
