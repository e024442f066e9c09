"""The loader cache: reading the host's glibc ``/etc/ld.so.cache`` (format
``glibc-ld.so.cache1.1``) without running ldconfig, and refreshing a container's.

The cache maps each library's soname (``libcuda.so.1``) to the path the loader uses, which is how
the host's driver libraries are found wherever the distribution or the driver installer put them.
"""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Iterator

from hydria.log import Logger
from hydria.runtime.mounts import resolve_in_root

log = Logger(__name__)

MAGIC = b"glibc-ld.so.cache1.1"
_HEADER = struct.Struct("<20sII4xI12x")  # magic+version, nlibs, len_strings, flags+pad, extension_offset
_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_ELF_LIBC6 = 0x0003
_ARCH_FLAGS = {"x86_64": 0x0300, "aarch64": 0x0A00, "ppc64le": 0x0500}


def entries(data: bytes, machine: str | None = None) -> Iterator[tuple[str, str]]:
    """(soname, path) of every 64-bit glibc library of this machine's architecture in the cache.
    An unreadable or foreign cache yields nothing."""
    arch = _ARCH_FLAGS.get(machine or os.uname().machine)
    start = data.find(MAGIC)
    if arch is None or start < 0 or len(data) < start + _HEADER.size:
        return
    _, count, _, _ = _HEADER.unpack_from(data, start)
    offset = start + _HEADER.size
    for index in range(count):
        position = offset + index * _ENTRY.size
        if position + _ENTRY.size > len(data):
            return
        flags, key, value, _, _ = _ENTRY.unpack_from(data, position)
        if flags & 0xFF != _ELF_LIBC6 or flags & 0xFF00 != arch:
            continue
        yield _string(data, start + key), _string(data, start + value)


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset:end if end >= 0 else len(data)].decode(errors="replace")


def refresh(root: str, what: str) -> None:
    """Run the image's own ldconfig chrooted into the rootfs (it knows the image's glibc and
    ld.so.conf) after host libraries were mounted in; ``what`` names them in the warning. Images
    without one (static or musl) find libraries in the default directory."""
    for candidate in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.isfile(resolve_in_root(root, candidate)):
            break
    else:
        return

    def enter() -> None:
        os.chroot(root)
        os.chdir("/")
    result = subprocess.run([candidate], preexec_fn=enter, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        log.warning("ldconfig in the container failed (%s): the loader may not find %s",
                    result.stderr.strip() or f"status {result.returncode}", what)
