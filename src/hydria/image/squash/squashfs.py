"""Writing squashfs images from a tar stream with squashfs-tools-ng's ``tar2sqfs``.

``HYDRIA_SQUASH_OPTIONS`` is written in mksquashfs's terms (as ``ENROOT_SQUASH_OPTIONS`` is), so
existing configurations keep working; :func:`squash_plan` translates it. Blocks stored
uncompressed (``-noD``, ``-noI``, ``-noF``, ``-noX``: enroot's default ``-comp lzo -noD``) are
what tar2sqfs cannot write, as are lzo algorithms but lzo1x_999, and its lz4 images are what
unsquashfs cannot read (``REPACKED_COMPRESSORS``): then tar2sqfs writes a quick zstd image and
mksquashfs, which reads no tar before 4.6, repacks it from the pseudo file that
``unsquashfs -pf`` makes of it (owners, modes, links and data as they are; no extended
attributes before 4.6), with the options as given (:func:`repack`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from hydria.anonfile import AnonymousFile, anonymous_file
from hydria.errors import ConfigError, HydriaError, MissingTool
from hydria.log import Logger
from hydria.record import Record
from hydria.tools import run_tool
from hydria.units import parse_size

log = Logger(__name__)

TAR2SQFS = "tar2sqfs"
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Python 3.9's fcntl lacks the name (Linux's value)
COMPRESSORS = frozenset({"gzip", "lzma", "lzo", "xz", "lz4", "zstd"})
MKSQUASHFS_DEFAULT_COMPRESSOR = "gzip"
# tar2sqfs's compressor for an image that mksquashfs repacks: fast to write and read, and read
# by unsquashfs 4.5 (unlike tar2sqfs's lz4 images: REPACKED_COMPRESSORS).
REPACKED_COMPRESSOR = "zstd"
# Compressors whose tar2sqfs images unsquashfs 4.5 rejects ("failed to read id table block": tar2sqfs
# 1.2 keeps a metadata block compressed where lz4 made it larger), so that neither the read cache
# nor create --unpack could unpack them: mksquashfs writes these.
REPACKED_COMPRESSORS = frozenset({"lz4"})
# tar2sqfs 1.2 writes lzo with this algorithm only ("creating compressor: unknown or not supported"
# for the others, which mksquashfs writes: enroot sites may ask for -Xalgorithm lzo1x_1).
TAR2SQFS_LZO_ALGORITHM = "lzo1x_999"
# mksquashfs options tar2sqfs has no use for: hydria already does what they ask, they only
# affect mksquashfs's own reporting, or they choose how metadata (a small part of an image) is
# compressed, which tar2sqfs decides with the data's compressor.
_IGNORED = frozenset({"-all-root", "-root-owned", "-exit-on-error", "-no-progress", "-progress",
                      "-quiet", "-no-recovery", "-no-duplicates", "-no-sparse", "-noappend",
                      "-always-use-fragments", "-no-fragments", "-noFragments"})
# mksquashfs's switches for parts stored uncompressed, by their short names.
_UNCOMPRESSED = {"-noD": "-noD", "-noDataCompression": "-noD", "-noI": "-noI", "-noInodeCompression": "-noI",
                 "-noF": "-noF", "-noFragmentCompression": "-noF", "-noX": "-noX", "-noXattrCompression": "-noX",
                 "-noId": "-noId", "-noIdTableCompression": "-noId"}
_ALL_UNCOMPRESSED = "-no-compression"  # mksquashfs's: all of them
# mksquashfs's -X options: tar2sqfs's name for each, and the compressors that take it.
_EXTRAS = {"-Xcompression-level": ("level", {"gzip", "lzo", "xz", "lzma", "zstd"}),
           "-Xwindow-size": ("window", {"gzip"}),
           "-Xdict-size": ("dictsize", {"xz", "lzma"}),
           "-Xalgorithm": ("algorithm", {"lzo"})}


class SquashfsFailed(HydriaError):
    """tar2sqfs (or mksquashfs) could not write the image."""


def _block_size(text: str) -> int:
    """``-b``'s value, which squashfs allows as a power of two from 4K to 1M."""
    size = parse_size(text)
    if size is None or size not in _BLOCK_SIZES:
        raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: invalid block size {text!r}",
                          hint="a power of two from 4K to 1M, e.g. -b 128K (squashfs's default) or -b 1M")
    return size


_BLOCK_SIZES = frozenset(1 << shift for shift in range(12, 21))


class SquashPlan(Record):
    """How an image is written: ``tar2sqfs``'s arguments, and where the options ask for parts
    stored uncompressed, ``mksquashfs``'s, to repack what tar2sqfs wrote (None: no repack)."""
    tar2sqfs: list[str]
    mksquashfs: list[str] | None


def squash_plan(squash_options: str, processors: int) -> SquashPlan:
    """Translate mksquashfs options into the tar2sqfs arguments that mean the same, quietly: no
    ``-comp`` is mksquashfs's gzip, and a ``-X`` option only goes to the compressor that takes
    it. Parts stored uncompressed need mksquashfs, which gets the same options in its terms.

    Raises:
        ConfigError: an option that means nothing tar2sqfs can do, or a malformed value.
    """
    words = shlex.split(squash_options)
    compressor = MKSQUASHFS_DEFAULT_COMPRESSOR
    block_size: int | None = None
    extras: dict[str, str] = {}
    high_compression = no_xattrs = False
    uncompressed: list[str] = []
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
            block_size = _block_size(value())
        elif word in _EXTRAS:
            extras[word] = value()
        elif word == "-Xhc":
            high_compression = True
        elif word == "-no-xattrs":
            no_xattrs = True
        elif word in ("-mkfs-time", "-all-time", "-processors"):
            value()  # times come from the layers; parallelism from HYDRIA_MAX_PROCESSORS
        elif word in _UNCOMPRESSED or word == _ALL_UNCOMPRESSED:
            uncompressed += [_UNCOMPRESSED[word]] if word in _UNCOMPRESSED else sorted(set(_UNCOMPRESSED.values()))
        elif word not in _IGNORED:
            raise ConfigError(f"HYDRIA_SQUASH_OPTIONS: {word} is not supported",
                              hint="supported: -comp NAME, -Xcompression-level N, -b SIZE, -Xhc, "
                                   "-Xdict-size N, -Xwindow-size N, -no-xattrs, -noD/-noI/-noF/-noX")
        i += 1
    taken = {option: setting for option, setting in extras.items() if compressor in _EXTRAS[option][1]}
    common = [*(["--block-size", str(block_size)] if block_size else []), *(["--no-xattr"] if no_xattrs else [])]
    jobs = _tar2sqfs_jobs(processors)
    other_lzo = compressor == "lzo" and taken.get("-Xalgorithm", TAR2SQFS_LZO_ALGORITHM) != TAR2SQFS_LZO_ALGORITHM
    if uncompressed or other_lzo or compressor in REPACKED_COMPRESSORS:
        repack = ["-comp", compressor, *(w for option, setting in taken.items() for w in (option, setting)),
                  *(["-Xhc"] if high_compression and compressor == "lz4" else []),
                  *(["-b", str(block_size)] if block_size else []), *(["-no-xattrs"] if no_xattrs else []),
                  *dict.fromkeys(uncompressed), *(["-processors", str(processors)] if processors > 0 else [])]
        plan = SquashPlan([*common, "--compressor", REPACKED_COMPRESSOR, "--comp-extra", "level=1", *jobs], repack)
    else:
        comp_extra = [f"{_EXTRAS[option][0]}={setting}" for option, setting in taken.items()]
        plan = SquashPlan([*common, "--compressor", compressor,
                           *(["--comp-extra", ",".join(comp_extra)] if comp_extra else []), *jobs], None)
    log.debug("HYDRIA_SQUASH_OPTIONS %r: %s", squash_options, plan)
    return plan


def mounted_only_plan(processors: int) -> SquashPlan:
    """tar2sqfs's own lz4, for an image that only hydria's reader or squashfuse mounts (a build's
    base image): the fastest to write and to read. unsquashfs cannot read it
    (``REPACKED_COMPRESSORS``), and nothing unpacks it."""
    return SquashPlan(["--compressor", "lz4", *_tar2sqfs_jobs(processors)], None)


def _tar2sqfs_jobs(processors: int) -> list[str]:
    """tar2sqfs's threads: ``HYDRIA_MAX_PROCESSORS``, or its own default for 0."""
    return ["--num-jobs", str(processors)] if processors > 0 else []


def repack(source: str, pseudo: str, target: str, arguments: list[str], pass_fds: tuple[int, ...] = ()) -> None:
    """Write ``target`` with ``mksquashfs ARGUMENTS`` from the image ``source``, through the pseudo
    file (``pseudo``: a new file, as large as the image's data uncompressed) that ``unsquashfs -pf``
    makes of it: mksquashfs 4.5 reads no tar, and seeks in its pseudo file (no pipe).

    Raises:
        ToolFailed: with the tools' own message; MissingTool.
    """
    hint = "check that the output's file system has room for the image and its uncompressed data"
    run_tool(["unsquashfs", "-no-progress", "-pf", pseudo, source], "cannot repack the image: unsquashfs",
             hint=hint, pass_fds=pass_fds)
    run_tool(["mksquashfs", "-", target, "-pf", pseudo, "-noappend", "-quiet", "-no-progress", *arguments],
             "cannot repack the image: mksquashfs", pass_fds=pass_fds,
             hint=f"{hint}; mksquashfs 4.5 cannot describe every tree (names with a tab or a line break, "
                  "paths over 16 KiB): for such an image, HYDRIA_SQUASH_OPTIONS without -noD, -noI, -noF, -noX "
                  "and another compressor than lz4")


T = TypeVar("T")


def squashed(image: AnonymousFile, plan: SquashPlan, write: Callable[[AnonymousFile, list[str]], object]) -> None:
    """Make the squashfs ``image`` as ``plan`` says: ``write(file, tar2sqfs's options)`` makes it
    with tar2sqfs, and where the plan repacks, mksquashfs repacks that quick image into ``image``
    (neither of the helper files is ever named)."""
    if plan.mksquashfs is None:
        write(image, plan.tar2sqfs)
        return
    with anonymous_file(image.target) as quick, anonymous_file(image.target) as pseudo:
        write(quick, plan.tar2sqfs)
        repack(quick.path, pseudo.path, image.path, plan.mksquashfs, (quick.fd, pseudo.fd, image.fd))


def squash_tar(output: str, options: list[str], pass_fds: tuple[int, ...], write: Callable[[IO[bytes]], T],
               written: Callable[[], object] | None = None) -> T:
    """Run tar2sqfs into ``output`` on the tar that ``write`` writes to its input; ``write``'s
    result (``written`` runs once the tar is all there, before tar2sqfs finishes). Raises
    SquashfsFailed with tar2sqfs's own words; stops it on any other failure."""
    writer = Tar2Sqfs(output, options, pass_fds)
    try:
        try:
            result = write(writer.stdin)
        except BrokenPipeError:
            writer.finish()  # tar2sqfs stopped reading: raises with its own message
            raise SquashfsFailed("tar2sqfs stopped reading the tar stream") from None
        if written is not None:
            written()
        writer.finish()
    except BaseException:  # also Ctrl-C while tar2sqfs compresses the last blocks: it goes too
        writer.abort()
        raise
    return result


FULL_BELOW = 4 << 20  # bytes free under which a failed write's file system counts as full


def full_folder(output: str) -> str | None:
    """The folder of ``output`` (a path, or an anonymous file's ``/proc/self/fd/N``) when its file
    system has less than ``FULL_BELOW`` bytes free for this user, else None."""
    try:
        info = os.statvfs(output)
        folder = os.path.dirname(os.path.realpath(output))
    except OSError:
        return None
    return folder if info.f_bavail * info.f_frsize < FULL_BELOW else None


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
        self.output = str(output)
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
            message = f"tar2sqfs failed: {stderr.strip() or 'exit status ' + str(self._process.returncode)}"
            folder = full_folder(self.output)
            if folder is not None:  # tar2sqfs says "I/O error" for a full disk
                raise SquashfsFailed(f"{message} ({folder}: No space left on device)",
                                     hint=f"make room on the file system of {folder} (hydria cache prune, "
                                          "hydria store prune), or write the image elsewhere")
            raise SquashfsFailed(message, hint="check that the output's file system has room for the image")

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
