"""SIGTERM (scancel of a Slurm step, kill) handled as Ctrl-C: Python raises KeyboardInterrupt,
so that ``finally`` blocks remove what was half-written and the tools a command runs are ended
with it, instead of Python dying mid-write and leaving both behind."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
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


def leave_signals_to_the_main_thread() -> None:
    """In a worker thread: block SIGINT and SIGTERM, so that the kernel delivers them to the main
    thread, where Python raises KeyboardInterrupt at once. A signal another thread took reaches
    Python only when the main thread next runs Python code: one waiting for a child (a build step)
    would raise it only after that child ended, wherever the code then is."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def worker_thread(target: Callable[..., object], *args: object) -> threading.Thread:
    """A started daemon thread running ``target(*args)`` that leaves signals to the main thread."""

    def run() -> None:
        leave_signals_to_the_main_thread()
        target(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
