"""Merge image layers into one root filesystem tar stream, top layer first, without unpacking.

Reading the top layer first lets every decision be made once, while streaming: an entry is
written unless an upper layer already wrote that path, deleted it (``.wh.NAME``), made its
directory opaque (``.wh..wh..opq``), or put a non-directory where it expects a parent directory.
Only the set of paths seen is kept in memory, never file contents.

Layers are untrusted: a path with ``..`` is refused, absolute paths become relative, device nodes
are dropped (an unprivileged container cannot use them), only ``user.*`` extended attributes are
kept, and every entry gets at least owner read (and owner rwx on directories) so that the image
works for the unprivileged user who runs it, as enroot's import does.

Python's tarfile only parses headers; file content goes from the layer's decompressed chunks to
the output as it is (the whole image passes through here, so every copy counts).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from hydria.errors import HydriaError
from hydria.image.blobs.compression import CHUNK, DECOMPRESSION_ERRORS
from hydria.record import Record

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
# A layer image's marks (image/squash/layer_image.py writes them): the overlay's own extended attributes.
OVERLAY_XATTRS = "SCHILY.xattr.user.overlay."
OPAQUE_XATTR = OVERLAY_XATTRS + "opaque"
ENCODING = "utf-8"  # of names in the layers and in the merged stream, as tarfile's default
BLOCK = tarfile.BLOCKSIZE
_UNREADABLE: tuple[type[Exception], ...] = (tarfile.TarError, *DECOMPRESSION_ERRORS)


class UnsafeLayer(HydriaError):
    """A layer entry that would land outside the root filesystem, or a broken link."""


class UnreadableLayer(HydriaError):
    """A layer that is not a tar archive in the compression its first bytes announce."""


def clean_path(name: str, layer: str) -> str:
    """``name`` as a relative path without ``.`` parts; ``""`` is the root.

    Raises:
        UnsafeLayer: the path has a ``..`` component.
    """
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeLayer(f"layer {layer}: entry {name!r} would land outside the root filesystem",
                          hint="the image is malformed or malicious; nothing was written")
    return "/".join(parts)


def ancestors(path: str) -> Iterator[str]:
    """Proper ancestors of a relative path, nearest last: ``a/b/c`` gives ``a``, ``a/b``."""
    index = path.find("/")
    while index >= 0:
        yield path[:index]
        index = path.find("/", index + 1)


class Deletion(Record):
    """What a marker entry of a layer deletes: ``path`` itself, or, ``opaque``, all that the layers
    below have in the folder ``path``."""

    path: str
    opaque: bool


NOTHING = Deletion("", False)


def deletion(path: str) -> Deletion | None:
    """What the layer entry ``path`` deletes when it is a marker (``.wh.NAME``, ``.wh..wh..opq``;
    aufs's own ``.wh..wh.*`` and a bare ``.wh.`` delete NOTHING); None for any other entry."""
    parent, _, base = path.rpartition("/")
    if not base.startswith(WHITEOUT):
        return None
    if base == OPAQUE:
        return Deletion(parent, True)
    if base == WHITEOUT or base.startswith(WHITEOUT + WHITEOUT):
        return NOTHING
    return Deletion(f"{parent}/{base[len(WHITEOUT):]}".lstrip("/"), False)


def overlay_deletion(path: str, member: tarfile.TarInfo) -> Deletion | None:
    """What the entry ``member`` at ``path`` of a layer image deletes: itself where it is a
    character device 0/0, what lower layers have in it where it is a folder marked opaque (the
    folder itself stays); None for any other entry. The overlay's marks are taken off the entry."""
    opaque = member.pax_headers.get(OPAQUE_XATTR) == "y"
    member.pax_headers = {key: value for key, value in member.pax_headers.items() if not key.startswith(OVERLAY_XATTRS)}
    if member.ischr() and member.devmajor == member.devminor == 0:
        return Deletion(path, False)
    return Deletion(path, True) if opaque and member.isdir() else None


def usable_mode(mode: int, is_dir: bool) -> int:
    """enroot's permission fix: owner may read everything, and enter and write directories."""
    if is_dir:
        return mode | 0o700
    return mode | 0o400 | (0o100 if mode & 0o111 else 0)


class Sink(Protocol):
    """Where the merged tar goes: tar2sqfs's standard input, counted for the progress display."""

    def write(self, data: bytes | memoryview, /) -> object: ...


class LayerContent(Protocol):
    """An uncompressed layer tar as :class:`LayerStream` gives it: ``read1`` hands over what it
    has (up to ``size`` bytes), b"" at the end."""

    def read1(self, size: int, /) -> bytes: ...


class LayerStream(Record):
    """One layer: ``digest`` for messages, ``open`` gives its uncompressed tar. ``overlay_format``:
    a layer image's tar (image/squash/layer_image.py), whose deletions are character devices 0/0 and
    whose opaque folders are marked ``user.overlay.opaque=y``, in place of OCI's marker files."""

    digest: str
    open: Callable[[], AbstractContextManager[LayerContent]]
    overlay_format: bool = False


class ExtraFile(Record):
    """A file or directory that sits above every layer (the runtime files of the image format)."""

    path: str
    data: bytes | None  # None: a directory
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime: int = 0


def extra_info(extra: ExtraFile) -> tarfile.TarInfo:
    """The tar header of ``extra`` (a directory's, or a file's without its size)."""
    info = tarfile.TarInfo(extra.path)
    info.mode, info.uid, info.gid, info.mtime = extra.mode, extra.uid, extra.gid, extra.mtime
    if extra.data is None:
        info.type = tarfile.DIRTYPE
    return info


class _TarSource:
    """A layer's tar for tarfile's "r" mode, which reads headers with ``read`` and skips content
    with a forward ``seek``; the content of a file written out goes straight from the layer's
    chunks to the output (:meth:`copy_to`), never through tarfile's buffers."""

    def __init__(self, content: LayerContent) -> None:
        self._content = content
        self._chunk = b""
        self._offset = 0  # consumed part of _chunk
        self._position = 0

    def _take(self, size: int) -> Iterator[memoryview]:
        """Up to ``size`` bytes (all that is left when negative), as views of the chunks."""
        while size:
            if self._offset == len(self._chunk):
                self._chunk, self._offset = self._content.read1(CHUNK), 0
                if not self._chunk:
                    return
            end = len(self._chunk) if size < 0 else min(len(self._chunk), self._offset + size)
            piece = memoryview(self._chunk)[self._offset:end]
            self._offset = end
            self._position += len(piece)
            size -= len(piece) if size > 0 else 0
            yield piece

    def read(self, size: int = -1) -> bytes:
        return b"".join(self._take(size))

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or position < self._position:
            raise io.UnsupportedOperation("a layer is read once, from start to end")
        for _ in self._take(position - self._position):
            pass
        return self._position

    def copy_to(self, out: Sink, size: int) -> None:
        """Write the next ``size`` bytes to ``out``.

        Raises:
            tarfile.ReadError: the layer ends before.
        """
        for piece in self._take(size):
            out.write(piece)
            size -= len(piece)
        if size:
            raise tarfile.ReadError("unexpected end of data")


@dataclass
class FlattenStats:
    entries: int = 0
    bytes: int = 0
    devices_dropped: int = 0
    whiteouts: int = 0


@dataclass
class _Claim:
    is_dir: bool
    explicit: bool


@dataclass
class _Merger:
    """The state of a top-down merge: what upper layers wrote, deleted and made opaque."""

    out: Sink
    claimed: dict[str, _Claim] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    link_targets: dict[str, str] = field(default_factory=dict)  # hardlink path -> target
    stats: FlattenStats = field(default_factory=FlattenStats)

    # Directories whose entries upper layers cover, as far as they were asked for: one look at an
    # entry's parent instead of at every ancestor keeps a deep tree linear (10,000 nested
    # directories). Cleared when what it derives from changes (a layer's end, a non-directory claim).
    blocked: dict[str, bool] = field(default_factory=dict)

    def covered(self, path: str, is_dir: bool) -> bool:
        """Whether upper layers hide or already provide ``path``."""
        if path in self.hidden or self._blocked(path.rpartition("/")[0]):
            return True
        claim = self.claimed.get(path)
        return claim is not None and (claim.explicit or not is_dir)

    def _blocked(self, directory: str) -> bool:
        """Whether ``directory`` or an ancestor is hidden, opaque or not a directory."""
        unknown = []
        while directory and directory not in self.blocked:
            unknown.append(directory)
            directory = directory.rpartition("/")[0]
        answer = self.blocked.get(directory, False)
        for directory in reversed(unknown):  # from the top down
            claim = self.claimed.get(directory)
            answer = answer or directory in self.hidden or directory in self.opaque or \
                (claim is not None and not claim.is_dir)
            self.blocked[directory] = answer
        return answer

    def under_non_directory(self, path: str) -> bool:
        """Whether a link or file that upper layers wrote lies on the way to ``path``."""
        return any((claim := self.claimed.get(parent)) is not None and not claim.is_dir
                   for parent in ancestors(path))

    def claim(self, path: str, is_dir: bool) -> None:
        self.claimed[path] = _Claim(is_dir, True)
        if path in self.blocked:
            self.blocked.clear()
        parent = path
        while parent := parent.rpartition("/")[0]:  # a claimed path's ancestors are all claimed
            if parent in self.claimed:
                break
            self.claimed[parent] = _Claim(True, False)

    def layer_ended(self, hidden: set[str], opaque: set[str]) -> None:
        """What a layer deleted and made opaque now hides the layers below it."""
        self.hidden |= hidden
        self.opaque |= opaque
        self.blocked.clear()

    def write(self, info: tarfile.TarInfo, content: Callable[[Sink, int], object] | None = None) -> None:
        write_entry(self.out, info, content, self.stats)


def write_entry(out: Sink, info: tarfile.TarInfo, content: Callable[[Sink, int], object] | None,
                stats: FlattenStats) -> None:
    """Write ``info``'s header and then its ``content(out, size)``, padded to a block."""
    out.write(info.tobuf(tarfile.PAX_FORMAT, ENCODING, "surrogateescape"))
    if info.size:
        assert content is not None
        content(out, info.size)
        out.write(bytes(-info.size % BLOCK))
    stats.entries += 1
    stats.bytes += info.size


def output_info(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = tarfile.REGTYPE if member.type in (tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE) else member.type
    info.mode = usable_mode(member.mode, member.isdir())
    info.uid, info.gid, info.mtime = member.uid, member.gid, member.mtime
    info.size = member.size if member.isreg() else 0
    info.linkname = member.linkname if member.issym() else ""
    info.devmajor, info.devminor = member.devmajor, member.devminor
    info.pax_headers = {k: v for k, v in member.pax_headers.items()
                        if k.startswith("SCHILY.xattr.user.")}
    return info


def flatten(layers: Sequence[LayerStream], extras: Sequence[ExtraFile], out: Sink,
            ensure_dirs: Sequence[str] = ()) -> FlattenStats:
    """Write the merged root filesystem of ``layers`` (top first) plus ``extras`` as a tar to ``out``;
    ``ensure_dirs`` are created (0755) when no layer has them, nor a link or file on their way.

    Raises:
        UnsafeLayer: an entry escapes the root, or a hardlink's target is not in the image.
        UnreadableLayer: a layer is not a tar archive (in the compression it announces).
    """
    merger = _Merger(out)
    for extra in extras:
        _write_extra(merger, extra)
    for layer in layers:
        _merge_layer(merger, layer)
    for directory in ensure_dirs:
        path = clean_path(directory, "WorkingDir")
        if path and path not in merger.claimed and not merger.under_non_directory(path):
            _write_extra(merger, ExtraFile(path, None, 0o755))
    for path, target in merger.link_targets.items():
        claim = merger.claimed.get(target)
        if claim is None or not claim.explicit or claim.is_dir:
            raise UnsafeLayer(f"hardlink /{path} points to /{target}, which is not a file of the image",
                              hint="the image is malformed; nothing was written")
    out.write(bytes(2 * BLOCK))  # the end of the archive
    return merger.stats


def _write_extra(merger: _Merger, extra: ExtraFile) -> None:
    info = extra_info(extra)
    if extra.data is None:
        merger.write(info, None)
    else:
        data = extra.data
        info.size = len(data)
        merger.write(info, lambda out, size: out.write(data))
    merger.claim(extra.path, extra.data is None)


@contextmanager
def _reading(layer: LayerStream) -> Iterator[tuple[_TarSource, Iterator[tarfile.TarInfo]]]:
    """The members of ``layer``, in order; the content of the one just given comes next from
    the source.

    Raises:
        UnreadableLayer: the layer is not a tar archive (in the compression it announces).
    """
    try:
        with layer.open() as content:
            source = _TarSource(content)
            yield source, _members(source)
    except _UNREADABLE as e:
        raise UnreadableLayer(f"layer {layer.digest} is not a readable tar archive: {e}",
                              hint="the image is malformed or its blob is corrupt; nothing was written") from None


@dataclass
class Deleted:
    """What a layer's markers delete: ``paths``, and all that the layers below have in ``folders``
    (made opaque); complete once the layer's entries have all been read."""

    paths: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)


@contextmanager
def tree_entries(layer: LayerStream, stats: FlattenStats) \
        -> Iterator[tuple[_TarSource, Iterator[tuple[str, tarfile.TarInfo]], Deleted]]:
    """The entries of ``layer`` that make its tree, each with its clean path, in order (the
    content of the one just given comes next from the source): the root folder, the deletion
    markers (gathered in the Deleted given too) and device nodes (counted as dropped) left out.

    Raises:
        UnsafeLayer, UnreadableLayer.
    """
    deleted = Deleted()
    with _reading(layer) as (source, members):
        yield source, _tree(layer, members, deleted, stats), deleted


def _tree(layer: LayerStream, members: Iterator[tarfile.TarInfo], deleted: Deleted,
          stats: FlattenStats) -> Iterator[tuple[str, tarfile.TarInfo]]:
    for member in members:
        path = clean_path(member.name, layer.digest)
        if not path:
            continue  # the root directory itself
        marker = overlay_deletion(path, member) if layer.overlay_format else deletion(path)
        if marker is not None:
            if marker is not NOTHING:
                (deleted.folders if marker.opaque else deleted.paths).add(marker.path)
            if not (layer.overlay_format and member.isdir()):
                continue  # a marker file; an opaque folder of a layer image stays
        if member.ischr() or member.isblk():
            stats.devices_dropped += 1
            continue
        yield path, member


def _members(source: _TarSource) -> Iterator[tarfile.TarInfo]:
    try:
        tar = tarfile.TarFile(fileobj=source, mode="r", encoding=ENCODING)  # type: ignore[arg-type]
    except tarfile.ReadError:
        if source.tell() == 0:
            return  # an empty blob: a layer without entries, as container engines take it
        raise
    while (member := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every member; the merge needs each once
        yield member


def content_writer(source: _TarSource, member: tarfile.TarInfo) -> Callable[[Sink, int], None]:
    """How to write ``member``'s content: straight from the layer, or, for a sparse file (GNU
    tar --sparse), its stored pieces with the holes between them filled with zeros."""
    pieces: list[tuple[int, int]] | None = member.sparse  # type: ignore[assignment]  # typeshed: int | None
    if not pieces:
        return source.copy_to

    def expand(out: Sink, size: int) -> None:
        position = 0
        for offset, length in pieces:
            if not length:
                continue  # GNU's map ends with empty entries
            if offset < position or offset + length > size:
                raise tarfile.ReadError(f"invalid sparse map of {member.name}")
            _write_zeros(out, offset - position)
            source.copy_to(out, length)
            position = offset + length
        _write_zeros(out, size - position)
    return expand


def _write_zeros(out: Sink, count: int) -> None:
    while count > 0:
        out.write(bytes(min(count, CHUNK)))
        count -= CHUNK


# What a layer has at a path it wrote or implied (the ``seen`` of takes()).
DIRECTORY, IMPLIED, OTHER, BELOW_OTHER = "directory", "implied", "other", "below another entry"


def takes(seen: dict[str, str], path: str, is_dir: bool) -> bool:
    """Whether a layer's entry for ``path`` counts, by what the layer's earlier entries made
    (``seen``, updated): its path is new (or an implied folder it now describes) and no entry of
    the layer that is not a folder lies on its way. The caller records what it takes."""
    found = seen.get(path)
    if found is not None:
        return is_dir and found == IMPLIED
    if not parent_is_folder(seen, path):
        seen[path] = BELOW_OTHER
        return False
    return True


def parent_is_folder(seen: dict[str, str], path: str) -> bool:
    """Whether ``path``'s parent is a folder of the layer (written or implied); the folders on the
    way that the layer implies are recorded, once each, so that a deep tree stays linear."""
    unknown = []
    folder = path.rpartition("/")[0]
    while folder and folder not in seen:
        unknown.append(folder)
        folder = folder.rpartition("/")[0]
    usable = not folder or seen[folder] in (DIRECTORY, IMPLIED)
    for implied in unknown:
        seen[implied] = IMPLIED if usable else BELOW_OTHER
    return usable


def _merge_layer(merger: _Merger, layer: LayerStream) -> None:
    seen: dict[str, str] = {}  # what this layer has at each path, as the layer alone makes it
    written: set[str] = set()  # paths this layer wrote
    passed: set[str] = set()  # regular files of this layer that upper layers covered
    pending: dict[str, list[str]] = {}  # covered target -> hardlinks of this layer that need it
    replaced: set[str] = set()  # covered paths where this layer replaced a lower folder by a file
    with tree_entries(layer, merger.stats) as (source, entries, deleted):
        for path, member in entries:
            if not takes(seen, path, member.isdir()):
                continue  # a second entry of the path, or one below a file of this layer
            seen[path] = DIRECTORY if member.isdir() else OTHER
            if merger.covered(path, member.isdir()) or path in written:
                if member.isreg():
                    passed.add(path)
                if not member.isdir():
                    replaced.add(path)  # hides what lower layers have below it, as the overlay does
                continue
            if member.islnk():
                target = clean_path(member.linkname, layer.digest)
                if target in passed:
                    pending.setdefault(target, []).append(path)
                    merger.claim(path, False)
                    written.add(path)
                    continue
                info = output_info(member, path)
                info.type, info.linkname = tarfile.LNKTYPE, target
                merger.link_targets[path] = target
                merger.write(info, None)
            elif member.isreg():
                merger.write(output_info(member, path), content_writer(source, member))
            elif member.isdir() or member.issym() or member.isfifo():
                merger.write(output_info(member, path), None)
            else:
                continue  # sparse and other exotic entries
            merger.claim(path, member.isdir())
            written.add(path)
    if pending:
        _write_covered_link_targets(merger, layer, pending)
    merger.stats.whiteouts += len(deleted.paths) + len(deleted.folders)
    merger.layer_ended(deleted.paths, deleted.folders | replaced)


def _write_covered_link_targets(merger: _Merger, layer: LayerStream, pending: dict[str, list[str]]) -> None:
    """Hardlinks of a layer whose target an upper layer replaced keep the layer's own content:
    read the layer again, write the first link as a file with that content, link the others to it."""
    with _reading(layer) as (source, members):
        for member in members:
            path = clean_path(member.name, layer.digest)
            links = pending.pop(path, None) if member.isreg() else None
            if not links:
                continue
            first, *others = links
            merger.write(output_info(member, first), content_writer(source, member))
            for other in others:
                info = output_info(member, other)
                info.type, info.size, info.linkname = tarfile.LNKTYPE, 0, first
                merger.write(info, None)
                merger.link_targets[other] = first
            if not pending:
                return
