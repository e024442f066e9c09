"""Reading layer blobs whatever their compression (gzip, zstd or none), told by their magic bytes
rather than their media type, which registries and tools do not always get right."""

from __future__ import annotations

import queue
import threading
from typing import IO, Any

import zstandard

try:  # ISA-L inflates gzip about twice as fast as zlib
    from isal import isal_zlib as zlib
except ImportError:  # pragma: no cover - platforms without an isal wheel
    import zlib  # type: ignore[no-redef]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20


def decompressed(raw: IO[bytes]) -> IO[bytes]:
    """A reader of the uncompressed content of ``raw``."""
    head = raw.read(4)
    source = _Prefixed(head, raw)
    if head.startswith(GZIP_MAGIC):
        return _Gunzip(source)  # type: ignore[return-value]
    if head.startswith(ZSTD_MAGIC):
        return zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)  # type: ignore[arg-type]
    return source  # type: ignore[return-value]


class _Prefixed:
    """``raw`` with bytes already read from it put back in front."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        self.head = head
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        if self.head:
            data, self.head = self.head, b""
            if size < 0:
                return data + self.raw.read()
            if size > len(data):
                data += self.raw.read(size - len(data))
            else:
                data, self.head = data[:size], data[size:]
            return data
        return self.raw.read(size)


class _Gunzip:
    """gzip decoding of a stream, including files of several gzip members. Output is produced
    only as it is asked for, so a small, highly compressed blob cannot fill the memory."""

    def __init__(self, source: _Prefixed) -> None:
        self.source = source
        self.inflater: Any = zlib.decompressobj(31)
        self.pending = b""  # compressed input not yet inflated
        self.eof = False

    def read(self, size: int = -1) -> bytes:
        pieces: list[bytes] = []
        produced = 0
        while not self.eof and (size < 0 or produced < size):
            if not self.pending:
                self.pending = self.source.read(CHUNK)
                if not self.pending:
                    pieces.append(self.inflater.flush())
                    self.eof = True
                    break
            piece = self.inflater.decompress(self.pending, 0 if size < 0 else size - produced)
            self.pending = self.inflater.unconsumed_tail
            if self.inflater.eof:  # the end of one gzip member; another may follow
                self.pending = self.inflater.unused_data + self.pending
                self.inflater = zlib.decompressobj(31)
            pieces.append(piece)
            produced += len(piece)
        return b"".join(pieces)


class Prefetcher:
    """Reads ``source`` (a decompressing reader) in a thread, ahead of the consumer.

    Inflating (zlib, ISA-L, zstd) releases the GIL, so it overlaps with the tar processing of the
    consumer. After the content, ``raw`` (the blob under the decompressor) is read to its end,
    which runs the digest check of a verifying reader even when the tar ends early.
    :meth:`finish` waits for all of it and raises what the thread raised.
    """

    _END = b""

    def __init__(self, source: IO[bytes], raw: IO[bytes], depth: int = 8) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self._buffer = b""
        self._offset = 0  # consumed part of _buffer: slicing it off would copy the rest every read
        self._done = False
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source, raw), daemon=True)
        self._thread.start()

    def _run(self, source: IO[bytes], raw: IO[bytes]) -> None:
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

    def read(self, size: int = -1) -> bytes:
        pieces = []
        wanted = size if size >= 0 else float("inf")
        while wanted > 0:
            if self._offset >= len(self._buffer):
                if self._done:
                    break
                self._buffer, self._offset = self._next(), 0
                continue
            end = len(self._buffer) if wanted == float("inf") else self._offset + int(wanted)
            piece = self._buffer[self._offset:end]
            self._offset += len(piece)
            wanted -= len(piece)
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

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
