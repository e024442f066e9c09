"""A blob read while it downloads: the reader waits for bytes, sees the end only once the
download has verified it, and gets the download's error."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from hydria.image.blobs.cache import DigestMismatch
from hydria.image.blobs.growing_blob import FollowingReader, GrowingBlob


@pytest.fixture
def download_file() -> Iterator[int]:
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    yield fd
    os.close(fd)


def write(blob: GrowingBlob, fd: int, data: bytes) -> None:
    os.write(fd, data)
    blob.grew(len(data))


def following(fd: int, written: bytes = b"") -> tuple[GrowingBlob, FollowingReader]:
    """A download into ``fd`` that has started (and written ``written``), and its reader."""
    blob = GrowingBlob()
    blob.started(fd)
    if written:
        write(blob, fd, written)
    reader = blob.follow()
    assert reader is not None
    return blob, reader


def later(action: object, delay: float = 0.2) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()  # type: ignore[operator]
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_reader_gets_bytes_as_they_arrive_and_the_end_only_when_verified(download_file: int) -> None:
    blob, reader = following(download_file, b"first ")
    assert reader.read(100) == b"first "  # what is there, without waiting for the rest
    thread = later(lambda: write(blob, download_file, b"second"))
    assert reader.read(100) == b"second"  # waited for it
    thread.join()
    started = time.monotonic()
    thread = later(blob.ended)
    assert reader.read(100) == b""  # the end, but only once the download said it is verified
    assert time.monotonic() - started >= 0.15
    thread.join()
    reader.close()


def test_readinto_fills_what_has_arrived(download_file: int) -> None:
    """Decompressors (ISA-L's gzip reader) read through readinto."""
    blob, reader = following(download_file, b"abc")
    buffer = bytearray(8)
    assert reader.readinto(memoryview(buffer)) == 3 and buffer[:3] == b"abc"
    thread = later(lambda: (write(blob, download_file, b"0123456789"), blob.ended()))
    assert reader.readinto(memoryview(buffer)) == 8 and buffer == b"01234567"
    assert reader.readinto(memoryview(buffer)) == 2 and buffer[:2] == b"89"
    assert reader.readinto(memoryview(buffer)) == 0
    thread.join()
    reader.close()


def test_reader_gets_the_downloads_error(download_file: int) -> None:
    blob, reader = following(download_file, b"0123456789")
    assert reader.read(4) == b"0123"
    failure = DigestMismatch("Checksum mismatch: sha256:ab")
    thread = later(lambda: blob.ended(failure))
    with pytest.raises(DigestMismatch):
        while reader.read(4):
            pass
    thread.join()
    assert reader.download_error() is failure


def test_download_error_waits_for_the_end(download_file: int) -> None:
    """A decompressor that fails first on corrupt bytes must not hide the checksum mismatch."""
    blob, reader = following(download_file)
    failure = DigestMismatch("Checksum mismatch: sha256:cd")
    thread = later(lambda: blob.ended(failure))
    assert reader.download_error() is failure
    thread.join()


def test_read_all_waits_for_the_whole_blob(download_file: int) -> None:
    blob, reader = following(download_file)

    def finish() -> None:
        write(blob, download_file, b"a" * 3000)
        write(blob, download_file, b"b" * 3000)
        blob.ended()
    thread = later(finish)
    assert reader.read() == b"a" * 3000 + b"b" * 3000
    thread.join()


def test_nothing_to_follow_once_the_cache_has_the_blob() -> None:
    """Another process downloaded it (this one never started), or it ended already."""
    blob = GrowingBlob()
    thread = later(blob.ended)
    assert blob.follow() is None
    thread.join()
    failed = GrowingBlob()
    failed.ended(DigestMismatch("Checksum mismatch: sha256:ef"))
    with pytest.raises(DigestMismatch):
        failed.follow()


def test_the_reader_s_waits_are_reported(download_file: int) -> None:
    waits: list[float] = []
    blob = GrowingBlob(waits.append)
    later(lambda: blob.started(download_file), 0.1)
    reader = blob.follow()  # waits for the download to start
    assert reader is not None and len(waits) == 1 and waits[0] >= 0.05
    write(blob, download_file, b"there")
    assert reader.read(100) == b"there" and len(waits) == 1  # no wait, nothing reported
    thread = later(lambda: write(blob, download_file, b"later"), 0.1)
    assert reader.read(100) == b"later"
    thread.join()
    assert len(waits) == 2 and waits[1] >= 0.05
    reader.close()
