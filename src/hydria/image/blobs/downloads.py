"""One download of a blob for all the users of a shared cache, without letting one user block another.

Each user's imports hold their own lock per blob (:mod:`hydria.image.blobs.cache`): nobody can hold
another user's. Across users, a download is *announced* instead: ``locks/<hex>.<uid>.active``,
owned by its downloader, holding when the download started, how many bytes it has and which
process downloads (:mod:`hydria.liveness`), rewritten every ``HEARTBEAT`` seconds. A user who finds an earlier announcement by another user waits for
that blob instead of downloading it too, but only while the announcement stays fresh (its
downloader is alive) and the download moves on (after ``GRACE`` seconds, ``MIN_RATE`` bytes a
second on average). Then it finds the blob, which it verifies against its digest as it does any
blob of another user, or downloads the blob itself. An announcement is only a hint: a forged
one costs a waiter at most ``GRACE`` plus the blob's size at ``MIN_RATE``, and names its owner.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hydria.digits import is_number
from hydria.interrupt import worker_thread
from hydria.liveness import holder_line, is_gone
from hydria.log import Logger
from hydria.paths import user_name
from hydria.record import Record

log = Logger(__name__)

HEARTBEAT = 2.0  # seconds between rewrites of an announcement
STALE = 10.0  # seconds after which an announcement that was not rewritten is over
GRACE = 20.0  # seconds a waiter allows a download before it must show progress
MIN_RATE = 1 << 20  # bytes a second an announced download must average, past GRACE, to be waited for
POLL = 0.5  # seconds between a waiter's looks
_NAME = re.compile(r"([0-9a-f]{64})\.(\d+)\.active")


class Announcement(Record):
    uid: int
    started: int  # time.time_ns() when the download began
    received: int  # bytes so far


class Announcer:
    """This user's announcement of the download of one blob, rewritten while it runs."""

    def __init__(self, locks: Path, hex_digest: str) -> None:
        self.path = locks / f"{hex_digest}.{os.geteuid()}.active"
        self.started = time.time_ns()
        self.received: Callable[[], int] = lambda: 0
        self._fd: int | None = None
        self._holder = holder_line()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def publish(self) -> None:
        """Announce (again); silently nothing where another user planted a file under this name."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError:
            return
        if os.fstat(fd).st_uid != os.geteuid():
            os.close(fd)
            return
        self._fd = fd
        self._write()
        self._stop.clear()
        self._beat = worker_thread(self._heartbeat)

    def withdraw(self) -> None:
        if self._fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def _write(self) -> None:
        assert self._fd is not None
        text = f"{self.started} {self.received()} {self._holder}\n".encode()
        try:
            os.pwrite(self._fd, text, 0)
            os.ftruncate(self._fd, len(text))
        except OSError:
            pass  # a full disk: the announcement goes stale, and others download for themselves

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            self._write()


@contextmanager
def announced(locks: Path, hex_digest: str) -> Iterator[Announcer]:
    announcer = Announcer(locks, hex_digest)
    announcer.publish()
    try:
        yield announcer
    finally:
        announcer.withdraw()


def announcements(locks: Path, hex_digest: str, size: int | None) -> list[Announcement]:
    """The fresh announcements of other users for the blob: each owned by the user its name
    says, rewritten within ``STALE`` seconds, by a process not known to be gone, and not claiming
    more bytes than the blob has."""
    found = []
    now = time.time()
    for path in locks.glob(f"{hex_digest}.*.active"):
        match = _NAME.fullmatch(path.name)
        if match is None or int(match.group(2)) == os.geteuid():
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            # only a regular file is read: a FIFO or folder planted under the name never blocks nor fails
            text = os.read(fd, 256).decode("ascii", "replace").split() if stat.S_ISREG(info.st_mode) else []
        except OSError:
            continue
        finally:
            os.close(fd)
        if info.st_uid != int(match.group(2)) or now - info.st_mtime > STALE or len(text) not in (2, 5) \
                or not all(is_number(t) for t in text[:2]) or is_gone(" ".join(text[2:])):
            continue
        announcement = Announcement(info.st_uid, int(text[0]), int(text[1]))
        if size is None or announcement.received <= size:
            found.append(announcement)
    return found


def wait_for_others(locks: Path, digest: str, size: int | None, mine: Announcer,
                    settled: Callable[[], bool]) -> None:
    """Wait while another user's earlier announced download of ``digest`` runs and progresses,
    until ``settled()`` (the blob is in the cache, or what is there will not do). ``mine`` is
    withdrawn meanwhile, so that later users wait for the same download, and published again
    when the wait ends otherwise."""
    hex_digest = digest.partition(":")[2]
    ahead = [a for a in announcements(locks, hex_digest, size) if (a.started, a.uid) < (mine.started, os.geteuid())]
    if not ahead:
        return
    mine.withdraw()
    if _waited(locks, digest, size, ahead, settled):
        return
    mine.started = time.time_ns()
    mine.publish()


def _waited(locks: Path, digest: str, size: int | None, ahead: list[Announcement],
            settled: Callable[[], bool]) -> bool:
    """True once ``settled()``; False when the announced downloads ended or stopped progressing."""
    hex_digest = digest.partition(":")[2]
    began = time.monotonic()
    first = max(a.received for a in ahead)
    downloader = user_name(ahead[0].uid)
    log.info("Waiting for %s's download of %s into the shared cache", downloader, digest)
    while not settled():
        others = announcements(locks, hex_digest, size)
        waited = time.monotonic() - began
        if not others:
            log.info("The download of %s by another user ended without the blob; downloading it", digest)
            return False
        if waited > GRACE and max(a.received for a in others) - first < MIN_RATE * (waited - GRACE):
            log.warning("%s's download of %s hardly progresses; downloading it", downloader, digest)
            return False
        time.sleep(POLL)
    return True
