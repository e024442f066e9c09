"""mksquashfs options (HYDRIA_SQUASH_OPTIONS, enroot's ENROOT_SQUASH_OPTIONS) translated into the
tar2sqfs arguments that mean the same, and where parts are to be stored uncompressed, mksquashfs's
arguments to repack tar2sqfs's image; without warnings."""

from __future__ import annotations

import logging

import pytest

from hydria.errors import ConfigError
from hydria.image.squash.squashfs import SquashPlan, squash_plan


@pytest.mark.parametrize(("options", "expected"), [
    # hydria's default
    ("-comp zstd -Xcompression-level 1", ["--compressor", "zstd", "--comp-extra", "level=1"]),
    # no -comp is mksquashfs's gzip, not tar2sqfs's xz
    ("-b 1M", ["--block-size", "1048576", "--compressor", "gzip"]),
    ("", ["--compressor", "gzip"]),
    # -X options go to the compressor that takes them, and only there
    ("-comp gzip -Xcompression-level 9 -Xwindow-size 15", ["--compressor", "gzip", "--comp-extra", "level=9,window=15"]),
    ("-comp xz -Xdict-size 8192 -Xhc", ["--compressor", "xz", "--comp-extra", "dictsize=8192"]),
    ("-comp lzo -Xalgorithm lzo1x_999 -Xcompression-level 8", ["--compressor", "lzo", "--comp-extra", "algorithm=lzo1x_999,level=8"]),
    ("-comp zstd -no-xattrs -all-root -processors 4", ["--no-xattr", "--compressor", "zstd"]),
])
def test_what_tar2sqfs_writes_itself(options: str, expected: list[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert squash_plan(options, 0) == SquashPlan(expected, None)
    assert not caplog.records  # quietly: an enroot.conf does not warn on every import


@pytest.mark.parametrize(("options", "expected"), [
    # enroot's default: data stored raw, the rest lzo
    ("-comp lzo -noD -exit-on-error", ["-comp", "lzo", "-noD"]),
    ("-noI -noD -noF -noX", ["-comp", "gzip", "-noI", "-noD", "-noF", "-noX"]),
    ("-comp zstd -noI -noX", ["-comp", "zstd", "-noI", "-noX"]),
    ("-noDataCompression -noD", ["-comp", "gzip", "-noD"]),
    # mksquashfs 4.6's switch, which 4.5 lacks: every part
    ("-comp lz4 -no-compression", ["-comp", "lz4", "-noD", "-noF", "-noI", "-noId", "-noX"]),
    # -X options only for the compressor that takes them, in mksquashfs's own terms
    ("-comp lzo -Xcompression-level 8 -Xdict-size 4 -noD -b 256K -no-xattrs",
     ["-comp", "lzo", "-Xcompression-level", "8", "-b", "262144", "-no-xattrs", "-noD"]),
    ("-comp lz4 -Xhc -noD", ["-comp", "lz4", "-Xhc", "-noD"]),
    # tar2sqfs's lz4 images are what unsquashfs 4.5 cannot read (the read cache, create --unpack)
    ("-comp lz4", ["-comp", "lz4"]),
    ("-comp lz4 -Xhc -b 1M", ["-comp", "lz4", "-Xhc", "-b", "1048576"]),
    ("-comp lz4 -Xcompression-level 9", ["-comp", "lz4"]),
    # tar2sqfs writes lzo with lzo1x_999 only ("unknown or not supported" for the others)
    ("-comp lzo -Xalgorithm lzo1x_1", ["-comp", "lzo", "-Xalgorithm", "lzo1x_1"]),
    ("-comp lzo -Xalgorithm lzo1x_1_15 -b 64K", ["-comp", "lzo", "-Xalgorithm", "lzo1x_1_15", "-b", "65536"]),
])
def test_parts_stored_uncompressed_are_written_by_mksquashfs(options: str, expected: list[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """tar2sqfs always compresses, and its lz4 images are ones that unsquashfs rejects: it writes a
    quick zstd image, which mksquashfs repacks as asked."""
    with caplog.at_level(logging.INFO):
        plan = squash_plan(options, 0)
    assert plan.mksquashfs == expected
    assert plan.tar2sqfs[-4:] == ["--compressor", "zstd", "--comp-extra", "level=1"]
    assert not caplog.records


def test_processors_become_jobs() -> None:
    assert squash_plan("-comp zstd", 3).tar2sqfs[-2:] == ["--num-jobs", "3"]
    assert squash_plan("-comp zstd -noD", 3).mksquashfs[-2:] == ["-processors", "3"]  # type: ignore[index]


@pytest.mark.parametrize(("options", "message"), [
    ("-comp brotli", "unknown compressor 'brotli'"),
    ("-comp", "-comp needs a value"),
    ("-b huge", "invalid block size 'huge'"),
    ("-sort file.txt", "-sort is not supported"),
])
def test_refused(options: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        squash_plan(options, 0)
