"""A blob that can be read while it downloads, so that the merge of a layer starts with its first
bytes instead of after its last (a cold import overlaps downloading with squashing).

The downloader announces the cache's anonymous file (:meth:`GrowingBlob.started`), each write
(:meth:`GrowingBlob.grew`) and the end (:meth:`GrowingBlob.ended`: verified, or the error). A
reader waits for bytes it has not got yet, gets the download's error as soon as there is one, and
sees the end of the blob only once the download has verified the digest: unverified bytes may be
merged into an image that is still anonymous, but no import succeeds with them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable


class Abandoned(Exception):
    """Raised in a reader's thread when the reader gave up waiting for the download."""


class GrowingBlob:
    """The state of one download, shared between the downloading thread and one reader."""

    def __init__(self, on_wait: Callable[[float], None] | None = None) -> None:
        """``on_wait(seconds)`` hears how long the reader waited each time it had to."""
        self._on_wait = on_wait
        self._changed = threading.Condition()
        self._fd: int | None = None  # our own duplicate of the download's file, while it runs
        self._size = 0
        self._ended = False
        self._error: BaseException | None = None
        self._abandoned = False

    def started(self, fd: int) -> None:
        """The download writes to ``fd`` (which stays the downloader's to close)."""
        with self._changed:
            self._fd = os.dup(fd)
            self._changed.notify_all()

    def grew(self, count: int) -> None:
        with self._changed:
            self._size += count
            self._changed.notify_all()

    def ended(self, error: BaseException | None = None) -> None:
        """The blob is complete and verified (``error`` None) or the download failed."""
        with self._changed:
            self._ended, self._error = True, error
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._changed.notify_all()

    def follow(self) -> FollowingReader | None:
        """A reader of the download while it runs; None once it has ended well (or when another
        process downloaded the blob), then the cache has it.

        Raises:
            BaseException: the download's error.
        """
        with self._changed:
            waited = self._wait_for(lambda: self._fd is not None or self._ended)
            error, fd = self._error, self._fd
            following = FollowingReader(self, os.dup(fd)) if error is None and fd is not None else None
        self._waited(waited)
        if error is not None:
            raise error
        return following

    def outcome(self) -> BaseException | None:
        """Wait for the download to end; its error, if it failed."""
        with self._changed:
            self._changed.wait_for(lambda: self._ended)
            return self._error

    def wait_beyond(self, offset: int) -> int:
        """Bytes readable at ``offset`` once there are some, 0 at the verified end.

        Raises:
            BaseException: the download's error.
            Abandoned: the reader gave up (:meth:`abandon`).
        """
        with self._changed:
            waited = self._wait_for(lambda: self._size > offset or self._ended or self._abandoned)
            error, available, abandoned = self._error, self._size - offset, self._abandoned
        self._waited(waited)
        if abandoned:
            raise Abandoned("the reader of the download gave up")
        if error is not None:
            raise error
        return available

    def abandon(self) -> None:
        """The reader gives up (an interrupt, an error elsewhere): a read that waits for the
        download raises :class:`Abandoned` at once instead of waiting for it to end."""
        with self._changed:
            self._abandoned = True
            self._changed.notify_all()

    def _wait_for(self, ready: Callable[[], bool]) -> float:
        """Wait (holding the condition) until ``ready``; the seconds it took."""
        if ready():
            return 0.0
        began = time.monotonic()
        self._changed.wait_for(ready)
        return time.monotonic() - began

    def _waited(self, seconds: float) -> None:
        if seconds and self._on_wait is not None:
            self._on_wait(seconds)


class FollowingReader:
    """Reads a :class:`GrowingBlob` from the start, waiting for the download as needed."""

    def __init__(self, blob: GrowingBlob, fd: int) -> None:
        self._blob = blob
        self._fd = fd
        self._offset = 0

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes as soon as there are some (everything to the end when negative)."""
        if size < 0:
            return b"".join(iter(lambda: self.read(1 << 20), b""))
        available = self._blob.wait_beyond(self._offset)
        if available == 0:
            return b""
        data = os.pread(self._fd, min(size, available), self._offset)
        self._offset += len(data)
        return data

    def readinto(self, buffer: memoryview) -> int:
        """:meth:`read` into ``buffer``."""
        available = self._blob.wait_beyond(self._offset)
        if available == 0:
            return 0
        count = os.preadv(self._fd, [memoryview(buffer)[:available]], self._offset)
        self._offset += count
        return count

    def abandon(self) -> None:
        """Stop waiting for the download (see :meth:`GrowingBlob.abandon`)."""
        self._blob.abandon()

    def download_error(self) -> BaseException | None:
        """After reading failed (say, a corrupt stream), what the download says: a checksum
        mismatch is the cause to report rather than the decompressor's complaint."""
        return self._blob.outcome()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FollowingReader:  # noqa: PYI034 typing.Self is 3.11, and src runs on 3.9
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
