"""One image layer as a tar stream in the overlay's format, for a layer image of its own
(runtime/layered.py): the container's overlay stacks layer images as the merge of
image/squash/flatten.py would have written them into one image.

What the OCI layer says with marker files, the overlay reads from the entries themselves: a
deletion (``.wh.NAME``) becomes a character device 0/0 named NAME, and an opaque folder
(``.wh..wh..opq``, or a folder that the layer deletes and makes again) gets
``user.overlay.opaque=y`` (and a folder that holds deletions ``user.overlay.origin``, so that the
overlay hides them in a folder no other layer has). Folders are written at the layer's end, when whether they are opaque
is known (tar2sqfs takes a folder after its entries). The rules of the merge hold within a layer:
paths are checked, device nodes dropped, modes made usable, only ``user.*`` extended attributes
kept (and none of the overlay's own: a layer cannot plant an opaque folder or a redirect), the
first of two entries of one path wins, nothing is written below a file.

A layer that cannot stand alone as a layer image raises :class:`LayerNeedsMerge`, and the image
is merged into one (image/kept/layered_import.py): a hardlink to a file of a lower layer, a root
folder made opaque.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from functools import partial

from hydria.errors import HydriaError
from hydria.image.squash.flatten import (
    BELOW_OTHER,
    DIRECTORY,
    IMPLIED,
    OPAQUE_XATTR,
    OTHER,
    OVERLAY_XATTRS,
    ExtraFile,
    FlattenStats,
    LayerStream,
    Sink,
    clean_path,
    content_writer,
    extra_info,
    output_info,
    parent_is_folder,
    takes,
    tree_entries,
    usable_mode,
    write_entry,
)

# On a folder that holds deletions: the overlay hides deletions only in folders it merges or that
# have an origin (fs/overlayfs: OVL_WHITEOUTS), and a folder of one layer image would show them.
ORIGIN_XATTR = OVERLAY_XATTRS + "origin"


class LayerNeedsMerge(HydriaError):
    """A layer that only makes sense merged with the layers below it."""


def overlay_layer(layer: LayerStream, out: Sink) -> FlattenStats:
    """Write ``layer`` as a tar in the overlay's format to ``out`` (no end-of-archive blocks:
    :func:`end_archive`).

    Raises:
        UnsafeLayer, UnreadableLayer: as flatten's.
        LayerNeedsMerge: see the module.
    """
    stats = FlattenStats()
    seen: dict[str, str] = {}
    regular: set[str] = set()
    folders: dict[str, tarfile.TarInfo] = {}
    with tree_entries(layer, stats) as (source, entries, deleted):
        for path, member in entries:
            if not takes(seen, path, member.isdir()):
                continue
            info = _clean_info(output_info(member, path))
            seen[path] = DIRECTORY if member.isdir() else OTHER  # as the merge records it
            if member.isdir():
                folders[path] = info
                continue
            if member.islnk():
                target = clean_path(member.linkname, layer.digest)
                if target not in regular:
                    raise LayerNeedsMerge(f"layer {layer.digest}: hardlink /{path} points to /{target}, "
                                          "which is not a file of this layer")
                info.type, info.linkname = tarfile.LNKTYPE, target
                write_entry(out, info, None, stats)
            elif member.isreg():
                write_entry(out, info, content_writer(source, member), stats)
                regular.add(path)
            elif member.issym() or member.isfifo():
                write_entry(out, info, None, stats)
            # else sparse and other exotic entries: left out
    _write_deletions(out, layer, seen, folders, deleted.paths, deleted.folders, stats)
    for info in folders.values():
        write_entry(out, info, None, stats)
    return stats


def _clean_info(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """``info`` without the overlay's own extended attributes."""
    info.pax_headers = {key: value for key, value in info.pax_headers.items() if not key.startswith(OVERLAY_XATTRS)}
    return info


def _write_deletions(out: Sink, layer: LayerStream, seen: dict[str, str], folders: dict[str, tarfile.TarInfo],
                     whiteouts: set[str], opaque: set[str], stats: FlattenStats) -> None:
    """A character device 0/0 for each deletion of a path this layer does not write again; the
    opaque mark on each folder made opaque, or deleted and made again by this layer."""
    if "" in opaque:
        raise LayerNeedsMerge(f"layer {layer.digest} makes the root folder opaque")
    holding = set()
    for path in sorted(whiteouts):
        found = seen.get(path)
        if found in (DIRECTORY, IMPLIED):
            opaque.add(path)
        elif found is None and parent_is_folder(seen, path):
            info = tarfile.TarInfo(path)
            info.type, info.mode = tarfile.CHRTYPE, 0
            write_entry(out, info, None, stats)
            stats.whiteouts += 1
            holding.add(path.rpartition("/")[0])
    for path in sorted(opaque):
        found = seen.get(path)
        if not (found is None and not parent_is_folder(seen, path) or found in (OTHER, BELOW_OTHER)):
            _mark(folders, path, OPAQUE_XATTR)
            stats.whiteouts += 1
    for path in holding - {""}:  # the root is merged with the overlay's upper folder
        _mark(folders, path, ORIGIN_XATTR)


def _mark(folders: dict[str, tarfile.TarInfo], path: str, xattr: str) -> None:
    """Give the folder ``path`` (made here when the layer only implied it) the extended attribute."""
    folder = folders.get(path)
    if folder is None:
        folder = folders[path] = tarfile.TarInfo(path)
        folder.type, folder.mode = tarfile.DIRTYPE, usable_mode(0o755, True)
    folder.pax_headers = {**folder.pax_headers, xattr: "y"}


def extras_layer(extras: Sequence[ExtraFile], out: Sink) -> FlattenStats:
    """The files above every layer (the image format's runtime files) as a layer's tar."""
    stats = FlattenStats()
    for extra in extras:
        info = extra_info(extra)
        if extra.data is None:
            write_entry(out, info, None, stats)
        else:
            info.size = len(extra.data)
            write_entry(out, info, partial(_write_data, extra.data), stats)
    return stats


def _write_data(data: bytes, out: Sink, size: int) -> None:
    out.write(data)


def end_archive(out: Sink) -> None:
    out.write(bytes(2 * tarfile.BLOCKSIZE))
