"""SIGTERM (scancel of a Slurm step, kill) and SIGHUP (a closed terminal) handled as Ctrl-C:
Python raises KeyboardInterrupt, so that ``finally`` blocks remove what was half-written and the
tools a command runs are ended with it, instead of Python dying mid-write and leaving both behind."""

from __future__ import annotations

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import threading  # not on the start path (docs/runtime.md): 1 ms
    from collections.abc import Callable

TERMINATED_STATUS = 143  # 128 + SIGTERM: what shells and schedulers read as "terminated"
INTERRUPTED_STATUS = 130  # 128 + SIGINT: Ctrl-C


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Python raises KeyboardInterrupt for Ctrl-C, so that the
    same cleanup runs, and told apart by its exit status (128 + the signal)."""

    def __init__(self, status: int = TERMINATED_STATUS) -> None:
        super().__init__()
        self.status = status


def terminate_as_interrupt(*, ctrl_c: bool = False) -> SignalsAsInterrupt:
    """SIGTERM, and SIGHUP unless it was ignored (``nohup``), raise :class:`Terminated` in the
    ``with`` block. With ``ctrl_c`` (a phase that makes something: a download, a squash, a build),
    SIGINT raises KeyboardInterrupt also where hydria started with it ignored, as a non-interactive
    shell starts its background jobs (``hydria import ... &`` in a script, then ``kill -INT``).
    Only in the main thread, where Python runs signal handlers; the previous handlers after."""
    return SignalsAsInterrupt(ctrl_c)


class SignalsAsInterrupt:
    """The block of :func:`terminate_as_interrupt`: a class, not ``contextlib.contextmanager``,
    whose import would cost every start (tests/unit/test_start_imports.py)."""

    def __init__(self, ctrl_c: bool) -> None:
        self.ctrl_c = ctrl_c
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return

        def terminate(signum: int, frame: object) -> None:
            raise Terminated(128 + signum)

        self.previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, terminate)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            self.previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, terminate)
        if self.ctrl_c and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exception: object) -> None:
        import signal

        for signum, handler in self.previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self.previous.clear()


def leave_signals_to_the_main_thread() -> None:
    """In a worker thread: block SIGINT, SIGTERM and SIGHUP, so that the kernel delivers them to the main
    thread, where Python raises KeyboardInterrupt at once. A signal another thread took reaches
    Python only when the main thread next runs Python code: one waiting for a child (a build step)
    would raise it only after that child ended, wherever the code then is."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def worker_thread(target: Callable[..., object], *args: object) -> threading.Thread:
    """A started daemon thread running ``target(*args)`` that leaves signals to the main thread."""

    import threading

    def run() -> None:
        leave_signals_to_the_main_thread()
        target(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
