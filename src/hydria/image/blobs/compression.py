"""Reading layer blobs whatever their compression (gzip, zstd or none), told by their magic bytes
rather than their media type, which registries and tools do not always get right."""

from __future__ import annotations

import gzip
import queue
import threading
from typing import Protocol

import zstandard
from isal import (  # ISA-L inflates gzip about twice as fast as zlib, without the GIL
    igzip,
    isal_zlib,
)

from hydria.image.ref.manifest import Blob
from hydria.interrupt import worker_thread

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20

# What a decompressor raises for data that is not what its magic bytes promised.
DECOMPRESSION_ERRORS: tuple[type[Exception], ...] = (
    gzip.BadGzipFile, EOFError, zstandard.ZstdError,
    isal_zlib.IsalError)  # type: ignore[assignment]  # isal's stubs call the class an instance


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def decompressed(raw: Blob) -> Readable:
    """A reader of the uncompressed content of ``raw``."""
    head = raw.read(4)
    source = _Prefixed(head, raw)
    if head.startswith(GZIP_MAGIC):
        return igzip.IGzipFile(fileobj=source, mode="rb")  # type: ignore[no-untyped-call]
    if head.startswith(ZSTD_MAGIC):
        return zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)  # type: ignore[arg-type]
    return source


class _Prefixed:
    """``raw`` with bytes already read from it put back in front."""

    def __init__(self, head: bytes, raw: Blob) -> None:
        self.head = head
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.raw.read(size)
        if 0 <= size < len(self.head):
            data, self.head = self.head[:size], self.head[size:]
            return data
        data, self.head = self.head, b""
        return data + self.raw.read(-1 if size < 0 else size - len(data))

    def readinto(self, buffer: memoryview) -> int:
        if not self.head:
            return self.raw.readinto(buffer)
        count = min(len(buffer), len(self.head))
        buffer[:count], self.head = self.head[:count], self.head[count:]
        return count


class Prefetcher:
    """Reads ``source`` (a decompressing reader) in a thread, ahead of the consumer, in chunks.

    Inflating (ISA-L, zstd) releases the GIL, so it overlaps with the tar processing of the
    consumer. After the content, ``raw`` (the blob under the decompressor) is read to its end,
    which runs the digest check of a verifying reader even when the tar ends early.
    :meth:`finish` waits for all of it and raises what the thread raised.
    """

    _END = b""

    def __init__(self, source: Readable, raw: Readable, depth: int = 8) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self._chunk = b""
        self._offset = 0  # consumed part of _chunk
        self._done = False
        self._cancelled = threading.Event()
        self._thread = worker_thread(self._run, source, raw)

    def _run(self, source: Readable, raw: Readable) -> None:
        try:
            while not self._cancelled.is_set() and (chunk := source.read(CHUNK)):
                self._queue.put(chunk)
            while not self._cancelled.is_set() and raw.read(CHUNK):
                pass
            self._queue.put(self._END)
        except BaseException as error:  # noqa: BLE001 handed to the consumer thread, which raises it
            self._queue.put(error)

    def _next(self) -> bytes:
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item == self._END:
            self._done = True
        return item

    def read1(self, size: int) -> bytes:
        """Up to ``size`` bytes from the current chunk (b"" at the end): a whole chunk is
        handed over as it is, not copied."""
        if self._offset >= len(self._chunk):
            if self._done:
                return b""
            self._chunk, self._offset = self._next(), 0
        piece = self._chunk[self._offset:self._offset + size]
        self._offset += len(piece)
        return piece

    def finish(self) -> None:
        """Consume what is left (the content after the tar's end, the rest of the blob)."""
        while not self._done:
            self._next()
        self._thread.join()

    def cancel(self) -> None:
        self._cancelled.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
