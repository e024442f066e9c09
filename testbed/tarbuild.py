"""Deterministic layer tars: entries with fixed times and owners, whiteouts and opaque markers."""

from __future__ import annotations

import copy
import io
import tarfile
from pathlib import Path
from types import TracebackType
from typing import IO, Self

EPOCH = 1_700_000_000  # every entry's mtime, so rebuilding a recipe gives the same digests
WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"


class LayerTar:
    """Writes one uncompressed layer tar; paths are relative to the image root."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 closed in __exit__

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._tar.close()

    def _info(self, name: str, kind: bytes, mode: int, uid: int = 0, gid: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name.strip("/"))
        info.type, info.mode, info.mtime, info.uid, info.gid = kind, mode, EPOCH, uid, gid
        return info

    def directory(self, name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode, uid, gid))

    def file(self, name: str, data: bytes | str, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
        payload = data.encode() if isinstance(data, str) else data
        info = self._info(name, tarfile.REGTYPE, mode, uid, gid)
        info.size = len(payload)
        self._tar.addfile(info, io.BytesIO(payload))

    def symlink(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def hardlink(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.LNKTYPE, 0o644)
        info.linkname = target.strip("/")
        self._tar.addfile(info)

    def whiteout(self, name: str) -> None:
        """Delete ``name`` from the layers below."""
        parent, _, base = name.strip("/").rpartition("/")
        self.file(f"{parent}/{WHITEOUT_PREFIX}{base}" if parent else WHITEOUT_PREFIX + base, b"")

    def opaque(self, directory: str) -> None:
        """Hide everything the layers below have in ``directory``."""
        self.file(f"{directory.strip('/')}/{OPAQUE_MARKER}", b"")

    def copy_member(self, member: tarfile.TarInfo, fileobj: IO[bytes] | None) -> None:
        """Add an entry read from another tar, normalising its name (no leading ``./``)."""
        member = copy.copy(member)
        member.name = _normalise(member.name)
        if member.islnk():
            member.linkname = _normalise(member.linkname)
        self._tar.addfile(member, fileobj)


def _normalise(name: str) -> str:
    return name.removeprefix("./").strip("/") or "."
