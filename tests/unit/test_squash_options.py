"""mksquashfs options (HYDRIA_SQUASH_OPTIONS, enroot's ENROOT_SQUASH_OPTIONS) translated into the
tar2sqfs arguments that mean the same, without warnings."""

from __future__ import annotations

import logging

import pytest

from hydria.errors import ConfigError
from hydria.image.squashfs import tar2sqfs_options


@pytest.mark.parametrize(("options", "expected"), [
    # hydria's default
    ("-comp zstd -Xcompression-level 1", ["--compressor", "zstd", "--comp-extra", "level=1"]),
    # enroot's default: data stored raw, metadata lzo -> the fastest to read
    ("-comp lzo -noD -exit-on-error", ["--compressor", "lz4"]),
    # a site asking for an uncompressed, fast image: never tar2sqfs's own default (xz)
    ("-noI -noD -noF -noX", ["--compressor", "lz4"]),
    ("-no-compression", ["--compressor", "lz4"]),
    # no -comp is mksquashfs's gzip, not tar2sqfs's xz
    ("-b 1M", ["--block-size", "1048576", "--compressor", "gzip"]),
    ("", ["--compressor", "gzip"]),
    # metadata-only switches change nothing tar2sqfs can express
    ("-comp zstd -noI -noX", ["--compressor", "zstd"]),
    # -X options go to the compressor that takes them, and only there
    ("-comp lz4 -Xhc", ["--compressor", "lz4", "--comp-extra", "hc"]),
    ("-comp lz4 -Xcompression-level 9", ["--compressor", "lz4"]),
    ("-comp gzip -Xcompression-level 9 -Xwindow-size 15", ["--compressor", "gzip", "--comp-extra", "level=9,window=15"]),
    ("-comp xz -Xdict-size 8192 -Xhc", ["--compressor", "xz", "--comp-extra", "dictsize=8192"]),
    ("-comp lzo -Xalgorithm lzo1x_999 -Xcompression-level 8", ["--compressor", "lzo", "--comp-extra", "algorithm=lzo1x_999,level=8"]),
    ("-comp lzo -Xcompression-level 8 -noD", ["--compressor", "lz4"]),
    ("-comp zstd -no-xattrs -all-root -processors 4", ["--no-xattr", "--compressor", "zstd"]),
])
def test_translation(options: str, expected: list[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert tar2sqfs_options(options, 0) == expected
    assert not caplog.records  # quietly: an enroot.conf does not warn on every import


def test_processors_become_jobs() -> None:
    assert tar2sqfs_options("-comp zstd", 3)[-2:] == ["--num-jobs", "3"]


@pytest.mark.parametrize(("options", "message"), [
    ("-comp brotli", "unknown compressor 'brotli'"),
    ("-comp", "-comp needs a value"),
    ("-b huge", "invalid block size 'huge'"),
    ("-sort file.txt", "-sort is not supported"),
])
def test_refused(options: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tar2sqfs_options(options, 0)
