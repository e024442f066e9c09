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

from hydria.errors import ConfigError, HydriaError
from hydria.log import Logger

log = Logger(__name__)

TAR2SQFS = "tar2sqfs"
PIPE_SIZE = 1 << 20
COMPRESSORS = frozenset({"gzip", "lzma", "lzo", "xz", "lz4", "zstd"})
# mksquashfs options tar2sqfs has no use for: hydria already does what they ask, or they only
# affect mksquashfs's own reporting.
_IGNORED = frozenset({"-all-root", "-root-owned", "-exit-on-error", "-no-progress", "-progress",
                      "-quiet", "-no-recovery", "-no-duplicates", "-no-sparse", "-noappend"})
# These make mksquashfs store data uncompressed; tar2sqfs always compresses, so they are dropped
# with a warning rather than failing an enroot configuration that uses them.
_COMPRESSION_OFF = frozenset({"-noD", "-noI", "-noF", "-noX", "-noId", "-noDataCompression",
                              "-noInodeCompression", "-noFragmentCompression", "-noXattrCompression",
                              "-no-compression"})


class SquashfsFailed(HydriaError):
    """tar2sqfs could not write the image."""


def tar2sqfs_options(squash_options: str, processors: int) -> list[str]:
    """Translate mksquashfs-style options into tar2sqfs arguments.

    Raises:
        ConfigError: an option tar2sqfs cannot honour, or a malformed value.
    """
    words = shlex.split(squash_options)
    args: list[str] = []
    extra: list[str] = []
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
            args += ["--compressor", compressor]
        elif word == "-b":
            args += ["--block-size", str(_size(value()))]
        elif word in ("-Xcompression-level", "-Xdict-size", "-Xwindow-size"):
            key = {"-Xcompression-level": "level", "-Xdict-size": "dictsize", "-Xwindow-size": "windowsize"}[word]
            extra.append(f"{key}={value()}")
        elif word in ("-Xhc",):
            extra.append("hc")
        elif word == "-no-xattrs":
            args.append("--no-xattr")
        elif word in ("-mkfs-time", "-all-time", "-processors"):
            value()  # times come from the layers; parallelism from HYDRIA_MAX_PROCESSORS
        elif word in _COMPRESSION_OFF:
            log.warning("HYDRIA_SQUASH_OPTIONS: %s is not supported by tar2sqfs and is ignored; "
                        "use -comp lz4 for the fastest images", word)
        elif word not in _IGNORED:
            raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: {word} is not supported",
                              hint="supported: -comp NAME, -Xcompression-level N, -b SIZE, -Xhc, "
                                   "-Xdict-size N, -no-xattrs")
        i += 1
    if extra:
        args += ["--comp-extra", ",".join(extra)]
    if processors > 0:
        args += ["--num-jobs", str(processors)]
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
            raise HydriaError(f"Command not found: {TAR2SQFS}",
                              hint="install the Debian package squashfs-tools-ng")
        argv = [binary, "--quiet", "--no-skip", "--force", "--defaults", "mode=0755",
                *options, str(output)]
        log.debug("running %s", shlex.join(argv))
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, pass_fds=pass_fds)
        assert self._process.stdin is not None
        self.stdin: IO[bytes] = self._process.stdin
        try:  # fewer, larger pipe transfers: the whole image passes through this pipe
            fcntl.fcntl(self.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
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
