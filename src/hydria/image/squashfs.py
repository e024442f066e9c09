"""Writing squashfs images from a tar stream with squashfs-tools-ng's ``tar2sqfs``.

``HYDRIA_SQUASH_OPTIONS`` is written in mksquashfs's terms (as ``ENROOT_SQUASH_OPTIONS`` is), so
existing configurations keep working; :func:`tar2sqfs_options` translates it.
"""

from __future__ import annotations

import fcntl
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import IO

from hydria.errors import ConfigError, HydriaError, MissingTool
from hydria.log import Logger

log = Logger(__name__)

TAR2SQFS = "tar2sqfs"
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Python 3.9's fcntl lacks the name (Linux's value)
COMPRESSORS = frozenset({"gzip", "lzma", "lzo", "xz", "lz4", "zstd"})
MKSQUASHFS_DEFAULT_COMPRESSOR = "gzip"
# Without data compression, the data is read at the speed of the disk: the nearest tar2sqfs
# (which always compresses, storing a block raw only where that does not shrink it) comes is
# lz4, the compressor that is fastest to read.
UNCOMPRESSED_DATA_COMPRESSOR = "lz4"
# mksquashfs options tar2sqfs has no use for: hydria already does what they ask, they only
# affect mksquashfs's own reporting, or they choose how metadata (a small part of an image) is
# compressed, which tar2sqfs decides with the data's compressor.
_IGNORED = frozenset({"-all-root", "-root-owned", "-exit-on-error", "-no-progress", "-progress",
                      "-quiet", "-no-recovery", "-no-duplicates", "-no-sparse", "-noappend",
                      "-noI", "-noF", "-noX", "-noId", "-noInodeCompression", "-noFragmentCompression",
                      "-noXattrCompression", "-noIdTableCompression", "-always-use-fragments",
                      "-no-fragments", "-noFragments"})
_DATA_UNCOMPRESSED = frozenset({"-noD", "-noDataCompression", "-no-compression"})
# mksquashfs's -X options: tar2sqfs's name for each, and the compressors that take it.
_EXTRAS = {"-Xcompression-level": ("level", {"gzip", "lzo", "xz", "lzma", "zstd"}),
           "-Xwindow-size": ("window", {"gzip"}),
           "-Xdict-size": ("dictsize", {"xz", "lzma"}),
           "-Xalgorithm": ("algorithm", {"lzo"})}


class SquashfsFailed(HydriaError):
    """tar2sqfs could not write the image."""


def tar2sqfs_options(squash_options: str, processors: int) -> list[str]:
    """Translate mksquashfs options into the tar2sqfs arguments that mean the same, quietly:
    no ``-comp`` is mksquashfs's gzip, uncompressed data (``-noD``) the fastest to read (lz4),
    and a ``-X`` option only goes to the compressor that takes it.

    Raises:
        ConfigError: an option that means nothing tar2sqfs can do, or a malformed value.
    """
    words = shlex.split(squash_options)
    compressor = MKSQUASHFS_DEFAULT_COMPRESSOR
    args: list[str] = []
    extras: dict[str, str] = {}
    high_compression = data_uncompressed = False
    i = 0

    def value() -> str:
        nonlocal i
        if i + 1 >= len(words):
            raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: {words[i]} needs a value")
        i += 1
        return words[i]

    while i < len(words):
        word = words[i]
        if word == "-comp":
            compressor = value()
            if compressor not in COMPRESSORS:
                raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: unknown compressor {compressor!r}",
                                  hint="use one of " + ", ".join(sorted(COMPRESSORS)))
        elif word == "-b":
            args += ["--block-size", str(_size(value()))]
        elif word in _EXTRAS:
            extras[word] = value()
        elif word == "-Xhc":
            high_compression = True
        elif word == "-no-xattrs":
            args.append("--no-xattr")
        elif word in ("-mkfs-time", "-all-time", "-processors"):
            value()  # times come from the layers; parallelism from HYDRIA_MAX_PROCESSORS
        elif word in _DATA_UNCOMPRESSED:
            data_uncompressed = True
        elif word not in _IGNORED:
            raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: {word} is not supported",
                              hint="supported: -comp NAME, -Xcompression-level N, -b SIZE, -Xhc, "
                                   "-Xdict-size N, -Xwindow-size N, -no-xattrs, -noD/-noI/-noF/-noX")
        i += 1
    if data_uncompressed:
        compressor, extras, high_compression = UNCOMPRESSED_DATA_COMPRESSOR, {}, False
    taken = [f"{_EXTRAS[option][0]}={setting}" for option, setting in extras.items()
             if compressor in _EXTRAS[option][1]]
    if high_compression and compressor == "lz4":
        taken.append("hc")
    args += ["--compressor", compressor]
    if taken:
        args += ["--comp-extra", ",".join(taken)]
    if processors > 0:
        args += ["--num-jobs", str(processors)]
    log.debug("HYDRIA_SQUASH_OPTIONS %r: tar2sqfs %s", squash_options, shlex.join(args))
    return args


def _size(text: str) -> int:
    units = {"K": 1 << 10, "k": 1 << 10, "M": 1 << 20, "m": 1 << 20}
    try:
        return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)
    except ValueError:
        raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: invalid block size {text!r}") from None


class Tar2Sqfs:
    """A running ``tar2sqfs`` that reads a tar stream on ``stdin`` and writes ``output``."""

    def __init__(self, output: Path | str, options: list[str], pass_fds: tuple[int, ...] = ()) -> None:
        binary = shutil.which(TAR2SQFS)
        if binary is None:
            raise MissingTool(TAR2SQFS,
                              hint="install the Debian package squashfs-tools-ng")
        argv = [binary, "--quiet", "--no-skip", "--force", "--defaults", "mode=0755",
                *options, str(output)]
        log.debug("running %s", shlex.join(argv))
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, pass_fds=pass_fds)
        assert self._process.stdin is not None
        self.stdin: IO[bytes] = self._process.stdin
        try:  # fewer, larger pipe transfers: the whole image passes through this pipe
            fcntl.fcntl(self.stdin.fileno(), F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # above /proc/sys/fs/pipe-max-size or the user's pipe quota: the default works

    def finish(self) -> None:
        """Close the stream and wait. Raises SquashfsFailed with tar2sqfs's own message."""
        try:
            self.stdin.close()
        except BrokenPipeError:
            pass
        stderr = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
        if self._process.wait() != 0:
            raise SquashfsFailed(f"tar2sqfs failed: {stderr.strip() or 'exit status ' + str(self._process.returncode)}",
                                 hint="check that the output's file system has room for the image")

    def abort(self) -> None:
        """Stop tar2sqfs after a failure elsewhere; the caller removes the partial output."""
        self._process.kill()
        self._process.wait()
        if self._process.stderr:
            self._process.stderr.close()
        try:
            self.stdin.close()
        except BrokenPipeError:
            pass
