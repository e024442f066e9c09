"""Every lock of hydria, two kinds:

* :func:`take` and :func:`held`: ``flock`` on a lock file opened without following a link and
  without blocking on a FIFO (a user of a shared folder may plant either under a lock's name),
  taken at once, within a bounded wait, or waiting as long as it takes. Closing the descriptor
  releases it, so a killed holder never leaves it held.
* :class:`LinkLock`: the lock that holds on NFS, where ``flock`` may not (the image store's
  imports): a file written beside it and linked to its name (exclusive, and never seen empty),
  holding its holder's :func:`hydria.liveness.holder_line`, touched every ``heartbeat`` seconds
  while held; one left untouched for ``stale_after`` seconds, or whose holder ran on this node and
  is gone, is taken over by a rename that only one of the waiting processes wins.
"""

from __future__ import annotations

import fcntl
import os
import time

from hydria.paths import open_regular
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:  # a start takes its locks without importing these (tests/unit/test_start_imports.py)
    import threading
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from pathlib import Path

POLL = 0.02  # seconds between tries of a bounded wait


def open_lock(path: str | Path, *, create: bool = True, mode: int = 0o600) -> int:
    """A descriptor of the lock file ``path`` (made with ``mode`` where missing and ``create``),
    never through a link (:func:`hydria.paths.open_regular`). Raises OSError: ELOOP for a link,
    EINVAL for what is not a regular file, EISDIR for a folder, ENOENT."""
    return open_regular(path, follow_links=False, create_mode=mode if create else None)


def acquire(fd: int, *, shared: bool = False, timeout: float | None = None) -> bool:
    """Lock the open file ``fd``: at once (``timeout`` 0), within ``timeout`` seconds, or waiting
    as long as it takes (None); whether it is locked."""
    operation = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if timeout is None:
        fcntl.flock(fd, operation)
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL)


def take(path: str | Path, *, shared: bool = False, timeout: float | None = None,
         create: bool = True, mode: int = 0o600) -> int | None:
    """The descriptor of the lock file ``path``, locked (:func:`acquire`'s ``shared`` and
    ``timeout``), or None where another process held it all along; closing it releases the lock.
    Raises OSError (:func:`open_lock`)."""
    fd = open_lock(path, create=create, mode=mode)
    try:
        if acquire(fd, shared=shared, timeout=timeout):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def held(path: str | Path, *, shared: bool = False, timeout: float | None = None,
         create: bool = True, mode: int = 0o600) -> AbstractContextManager[bool]:
    """Hold the lock file ``path`` for the ``with`` block (as :func:`take`); the block gets whether
    it is held."""
    from contextlib import contextmanager  # here: a start takes locks without its imports

    @contextmanager
    def holding() -> Iterator[bool]:
        fd = take(path, shared=shared, timeout=timeout, create=create, mode=mode)
        try:
            yield fd is not None
        finally:
            if fd is not None:
                os.close(fd)

    return holding()


HEARTBEAT = 5.0  # seconds between touches of a held link lock
# Seconds without a touch after which a link lock's holder is taken for dead: well past NFS's
# attribute cache (acregmax, 60 s by default), through which another node may see the heartbeat late.
STALE_AFTER = 180.0


class LinkLock:
    """The lock at ``path`` that holds on NFS (the module's docstring). ``taken_over(line, why)``
    is called by the one process that takes over a dead holder's lock, with the line that holder
    wrote, so that it can remove what the holder left half-made."""

    def __init__(self, path: Path, *, taken_over: Callable[[str, str], None] = lambda line, why: None,
                 heartbeat: float = HEARTBEAT, stale_after: float = STALE_AFTER) -> None:
        self.path = path
        self.taken_over = taken_over
        self.heartbeat = heartbeat
        self.stale_after = stale_after

    def held(self) -> AbstractContextManager[str | None]:
        """A ``with`` block that gets None while this process holds the lock (kept fresh by a
        heartbeat), else the name of its holder (:func:`hydria.liveness.holder_name`); a dead
        holder's is taken over first."""
        from contextlib import contextmanager  # here: a start takes locks without its imports

        return contextmanager(self._hold)()

    def _hold(self) -> Iterator[str | None]:
        import threading

        from hydria.interrupt import worker_thread

        holder = self._claim()
        if holder is not None:
            yield holder
            return
        stop = threading.Event()
        beat = worker_thread(self._beat, stop)
        try:
            yield None
        finally:
            stop.set()
            beat.join()
            self.path.unlink(missing_ok=True)

    def _claim(self) -> str | None:
        from hydria.liveness import holder_line, holder_name, is_gone

        holder = "another process"
        for _ in range(2):
            try:
                self._link_new(f"{holder_line()}\n")
                return None
            except FileExistsError:
                line, age = self._holder()
                holder = holder_name(line)
                if is_gone(line):
                    self._take_over(line, f"{holder} is gone (killed)")
                elif age > self.stale_after:
                    self._take_over(line, f"{holder} has not touched its lock for {age:.0f} s")
                else:
                    return holder
        return holder

    def _take_over(self, line: str, why: str) -> None:
        from hydria.paths import process_tag

        try:
            os.rename(self.path, self.path.with_name(f"{self.path.name}.stale.{process_tag()}"))  # one wins
        except FileNotFoundError:
            return
        for leftover in self.path.parent.glob(f"{self.path.name}.stale.*"):
            leftover.unlink(missing_ok=True)
        if line:  # the file it wrote its lock in, if it was killed before it removed that
            for staged in self.path.parent.glob(f".{self.path.name}.new.{line.split()[0]}.*"):
                staged.unlink(missing_ok=True)
        self.taken_over(line, why)

    def _link_new(self, line: str) -> None:
        """Make the lock holding ``line``, or raise FileExistsError: written beside it first and
        then linked, so that it is never seen empty, even of a holder killed at once, whose line
        must say that it is gone."""
        from hydria.paths import staging_file

        staged = staging_file(self.path, "new")
        try:
            staged.write_text(line)
            staged.chmod(0o644)
            os.link(staged, self.path)
        finally:
            staged.unlink(missing_ok=True)

    def _holder(self) -> tuple[str, float]:
        """What the lock holds and how long ago its holder last touched it."""
        try:
            fd = open_lock(self.path, create=False)
        except OSError:
            return "", 0.0
        try:
            return os.read(fd, 4096).decode(errors="replace").strip(), time.time() - os.fstat(fd).st_mtime
        finally:
            os.close(fd)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat):
            try:
                os.utime(self.path)
            except OSError:
                return
