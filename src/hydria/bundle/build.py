"""``hydria bundle``: write an image and hydria's runtime as one self-extracting file.

Layout: ``header.sh`` with its values filled in and padded to a fixed length, then two compressed
tar archives: hydria's runtime under ``.hydria/`` (the Python package, the system configuration
folders and, with ``--all``, the settings and the user's folders), then the image's root
filesystem, streamed by ``sqfs2tar`` from the squashfs so that no unpacked tree touches the disk.
Both are compressed with the image's own compressor (none when the image's data is uncompressed),
as enroot reuses the squashfs compressor. The file appears under its name only when complete.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import struct
import subprocess
import tarfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO, Protocol

from hydria.config import Settings
from hydria.digits import is_number
from hydria.errors import HydriaError, MissingTool
from hydria.image.squash.one_file import one_file, squashfs_tar
from hydria.image.squash.squashfs import squash_plan
from hydria.paths import output_file, staging_file, umask
from hydria.record import Record
from hydria.runtime.rootfs import check_image
from hydria.version import __version__

HEADER = Path(__file__).with_name("header.sh")
CONFIG_FOLDERS = ("environ.d", "mounts.d", "hooks.d")
UNCOMPRESSED_DATA = 0x0002  # squashfs superblock flag
CHUNK = 1 << 20
_LAST_TIME = 253402300799  # 9999-12-31 23:59:59 UTC: a later SOURCE_DATE_EPOCH is a mistake


class Codec(Record):
    name: str
    compress: tuple[str, ...]  # program and options; the data goes through stdin/stdout
    decompress: str  # the command line the bundle runs


CODECS = {
    "gzip": Codec("gzip", ("gzip", "-c", "-n"), "gzip -cd"),
    "xz": Codec("xz", ("xz", "-c", "-T0"), "xz -cd"),
    "zstd": Codec("zstd", ("zstd", "-q", "-c", "-T0"), "zstd -qcd"),
    "lz4": Codec("lz4", ("lz4", "-q", "-c"), "lz4 -qcd"),
    "lzo": Codec("lzo", ("lzop", "-c"), "lzop -cd"),
    "none": Codec("none", ("cat",), "cat"),
}
SQUASHFS_COMPRESSORS = {1: "gzip", 2: "xz", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}  # lzma: xz's format


class BundleOptions(Record):
    image: Path
    output: str | None = None
    target: str | None = None
    description: str = "none"
    checksum: bool = False
    include_config: bool = False  # --all
    force: bool = False


def build(options: BundleOptions, settings: Settings) -> Path:
    """Write the bundle; returns its path. Raises HydriaError (and leaves no file) for a missing
    or invalid image, an existing output without force, or a failing tool."""
    check_image(options.image)
    output = output_file(options.output, f"{options.image.name.removesuffix('.sqsh').removesuffix('.layers')}.run",
                         force=options.force or settings.force_override)
    if shutil.which("sqfs2tar") is None:
        raise MissingTool("sqfs2tar", hint="install squashfs-tools-ng")
    with ExitStack() as stack:
        image, held = one_file(options.image, output, squash_plan(settings.squash_options, settings.max_processors),
                               stack)
        _write_bundle(options, settings, image, held, output)
    return output


def _write_bundle(options: BundleOptions, settings: Settings, image: Path, held: tuple[int, ...],
                  output: Path) -> None:
    """Write the bundle of the image file ``image`` (whose descriptor ``held`` a reading process
    must inherit) at ``output``, under another name until it is complete."""
    target = options.target or output.name.removesuffix(".run")
    codec = image_codec(image)
    if shutil.which(codec.compress[0]) is None:
        raise MissingTool(codec.compress[0], hint="install the image's compressor (pigz, zstd, xz, lz4, lzop)")
    mtime = _archive_time()
    staging = staging_file(output, "bundling")
    try:
        with staging.open("r+b") as handle:
            reserved = len(_header(codec, target, options.description, sizes=(10**19,) * 2,
                                   sums=("f" * 64,) * 2, total_kb=10**19, offset=10**9))
            handle.seek(reserved)
            runtime = _runtime_tar(settings, options.include_config, mtime)
            runtime_size = _compress(codec, [io.BytesIO(runtime)], handle, settings)
            rootfs_bytes, rootfs_size = _compress_rootfs(codec, image, held, handle, settings)
            sizes = (runtime_size, rootfs_size)
            sums = _part_sums(handle, reserved, sizes) if options.checksum or settings.bundle_checksum else ()
            total_kb = (len(runtime) + rootfs_bytes) // 1024 + 1
            header = _header(codec, target, options.description, sizes, sums, total_kb, reserved)
            handle.seek(0)
            handle.write(header.ljust(reserved, b"\n"))
        os.chmod(staging, 0o777 & ~umask())
        os.utime(staging, (mtime, mtime))
        os.replace(staging, output)
    finally:
        staging.unlink(missing_ok=True)


def image_codec(image: Path) -> Codec:
    """The compressor of the image's data, from its superblock."""
    with image.open("rb") as handle:
        superblock = handle.read(96)
    compressor_id, flags = struct.unpack_from("<H", superblock, 20)[0], struct.unpack_from("<H", superblock, 24)[0]
    if flags & UNCOMPRESSED_DATA:
        return CODECS["none"]
    return CODECS[SQUASHFS_COMPRESSORS.get(compressor_id, "gzip")]


def _header(codec: Codec, target: str, description: str, sizes: tuple[int, ...], sums: tuple[str, ...],
            total_kb: int, offset: int) -> bytes:
    values = {
        "DESCRIPTION": shlex.quote(description), "COMPRESSION": shlex.quote(codec.name),
        "DECOMPRESS": shlex.quote(codec.decompress), "TARGET": shlex.quote(target),
        "VERSION": shlex.quote(__version__), "SHA256": shlex.quote(" ".join(sums)),
        "SIZES": " ".join(str(size) for size in sizes), "TOTAL_KB": str(total_kb), "OFFSET": str(offset),
    }
    text = HEADER.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text.encode()


def _archive_time() -> int:
    """The bundle's time: ``SOURCE_DATE_EPOCH`` (reproducible builds' convention) where it is set,
    else now. Raises HydriaError for a value that is not a time."""
    text = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not text:
        return int(time.time())
    if not is_number(text) or int(text) > _LAST_TIME:
        raise HydriaError(f"SOURCE_DATE_EPOCH={text!r} is not a time",
                          hint="give whole seconds since 1970 (date +%s), or unset it for the time of the bundle")
    return int(text)


def _runtime_tar(settings: Settings, include_config: bool, mtime: int) -> bytes:
    """hydria's package and configuration under ``.hydria/``, as an uncompressed tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def add(path: Path, name: str) -> None:
            info = tar.gettarinfo(str(path), name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)

        package = Path(__file__).resolve().parent.parent  # the hydria package
        add(package, ".hydria/lib/hydria")
        for path in _package_files(package):
            add(path, f".hydria/lib/hydria/{path.relative_to(package)}")
        sources = [("system", Path(settings.sysconf_path))] + ([("user", Path(settings.config_path))] if include_config else [])
        for kind, base in sources:
            for folder in CONFIG_FOLDERS:
                if (base / folder).is_dir():
                    for path in sorted(base.joinpath(folder).iterdir()):
                        if path.is_file():
                            add(path, f".hydria/etc/{kind}/{folder}/{path.name}")
        if include_config:
            conf = "".join(f"{key} '{value}'\n" for key, value in settings.as_variables().items()
                           if not key.endswith("_PATH") and "'" not in value)
            info = tarfile.TarInfo(".hydria/etc/system/hydria.conf")
            info.size, info.mtime, info.mode = len(conf.encode()), mtime, 0o644
            tar.addfile(info, io.BytesIO(conf.encode()))
    return buffer.getvalue()


def _package_files(package: Path) -> Iterator[Path]:
    for path in sorted(package.rglob("*")):
        if "__pycache__" not in path.parts and path.suffix != ".pyc" and (path.is_file() or path.is_dir()):
            yield path


def _compress_rootfs(codec: Codec, image: Path, held: tuple[int, ...], output: BinaryIO,
                     settings: Settings) -> tuple[int, int]:
    """Stream the image as a tar archive through the compressor; returns the uncompressed and the
    compressed size."""
    with squashfs_tar(str(image), "the image", xattrs=False, held=held) as tar:
        counted = _Counting(tar)
        size = _compress(codec, [counted], output, settings)
    return counted.count, size


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Counting:
    """A reader that counts the bytes read through it."""

    def __init__(self, stream: _Readable) -> None:
        self.stream = stream
        self.count = 0

    def read(self, size: int) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        return data


def _compress(codec: Codec, sources: list[_Readable], output: BinaryIO,
              settings: Settings) -> int:
    """Compress the sources' bytes onto ``output`` at its position; returns the bytes written."""
    command = list(codec.compress)
    if command[0] == "gzip" and shutil.which("pigz"):  # the same format, on every core
        command[0] = "pigz"
        if settings.max_processors > 0:
            command += ["-p", str(settings.max_processors)]
    output.flush()
    start = output.tell()
    writer = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.PIPE)
    assert writer.stdin is not None and writer.stderr is not None
    try:
        for source in sources:
            while chunk := source.read(CHUNK):
                writer.stdin.write(chunk)
        writer.stdin.close()
    except BrokenPipeError:
        pass
    except BaseException:  # interrupted: the compressor's output is not wanted
        writer.kill()
        writer.wait()
        raise
    errors = writer.stderr.read().decode(errors="replace").strip()
    if writer.wait() != 0:
        raise HydriaError(f"{command[0]} failed: {errors or f'exit status {writer.returncode}'}")
    end = os.lseek(output.fileno(), 0, os.SEEK_END)
    output.seek(end)
    return end - start


def _part_sums(handle: BinaryIO, offset: int, sizes: tuple[int, ...]) -> tuple[str, ...]:
    """The sha256 of each part, read back from the file."""
    sums = []
    handle.seek(offset)
    for size in sizes:
        digest = hashlib.sha256()
        left = size
        while left and (chunk := handle.read(min(CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
        sums.append(digest.hexdigest())
    return tuple(sums)
