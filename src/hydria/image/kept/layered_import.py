"""An import as a layered image (``HYDRIA_LAYERED_IMAGES``): each layer squashed once into a
layer image of its own, kept in a user's cache or in the image store and shared by every image
there that has the layer; the image is a small file that names them (runtime/layered.py). A new version of an image costs its
new layers, not the whole image again (docs/performance.md).

Where a layer cannot stand alone (image/squash/layer_image.py's LayerNeedsMerge), the caller imports the
image merged into one file instead.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import IO

from hydria.anonfile import AnonymousFile
from hydria.image.kept.interface import KeptImages
from hydria.image.kept.user_cache import CachedImage
from hydria.image.progress import Progress
from hydria.image.ref import manifest as mf
from hydria.image.ref.runtime_files import runtime_files
from hydria.image.squash.flatten import ExtraFile, LayerContent, LayerStream, Sink
from hydria.image.squash.layer_image import end_archive, extras_layer, overlay_layer
from hydria.image.squash.missing_folders import missing_folders
from hydria.image.squash.squashfs import SquashPlan, squash_tar
from hydria.log import Logger

log = Logger(__name__)

LayerOpener = Callable[[mf.ResolvedImage, mf.Descriptor], Callable[[], AbstractContextManager[LayerContent]]]


def write_layered(resolved: mf.ResolvedImage, kept: CachedImage, options: SquashPlan, squash_options: str,
                  progress: Progress, open_layer: LayerOpener, counted: Callable[[IO[bytes]], Sink]) -> Path:
    """Keep ``resolved`` as the layered image ``kept`` in a user's cache, squashing only the
    layers the cache lacks; its path. ``counted`` wraps a squash's input for the progress display.

    Raises:
        LayerNeedsMerge: a layer that cannot stand alone (nothing was kept for the image).
        HydriaError: as an import's.
    """
    cache = kept.cache
    with cache.making_layered():
        names = squash_layers(resolved, cache, options, squash_options, progress, open_layer, counted)
        entry = kept.keep_layered(names)
    cache.evict()
    progress.squashed()
    return entry


def squash_layers(resolved: mf.ResolvedImage, home: KeptImages, options: SquashPlan, squash_options: str,
                  progress: Progress, open_layer: LayerOpener, counted: Callable[[IO[bytes]], Sink]) -> list[str]:
    """The layer images of ``resolved`` in ``home``, the lowest first and the runtime files' on
    top: those ``home`` lacks squashed now.

    Raises:
        LayerNeedsMerge, HydriaError: as :func:`write_layered`.
    """
    names = [home.layer(d.digest, squash_options) for d in resolved.layers]
    missing = [d for d, name in zip(resolved.layers, names) if name is None]
    if missing:
        resolved.fetch_layers()
    progress.squashing()
    # The top layer first, as the downloads start (image/sources/pacing.py: for the merge, which
    # starts at the top): a layer squashed is the one being downloaded, not one queued behind it.
    for index, descriptor in reversed(list(enumerate(resolved.layers))):
        if names[index] is None:
            stream = LayerStream(descriptor.digest, open_layer(resolved, descriptor))
            began = time.monotonic()
            names[index] = home.add_layer(descriptor.digest, squash_options,
                                          partial(_squash, options=options, counted=counted,
                                                  write=partial(overlay_layer, stream)))
            # each layer's share of the import's critical path (docs/performance.md)
            log.debug("layer %s (%d bytes): downloaded and squashed in %.2f s", descriptor.digest, descriptor.size,
                      time.monotonic() - began)
    extras = _extras(resolved, [str(home.layer_file(name)) for name in names if name is not None])
    extras_digest = "sha256:" + hashlib.sha256(b"".join(map(_extra_key, extras))).hexdigest()
    top = home.layer(extras_digest, squash_options) or \
        home.add_layer(extras_digest, squash_options,
                       lambda image: _squash(image, options, counted, lambda out: extras_layer(extras, out)))
    progress.merge_ended()
    log.debug("%d layer image(s), %d squashed now", len(names) + 1, len(missing))
    return [*(name for name in names if name is not None), top]


def _extras(resolved: mf.ResolvedImage, layers: list[str]) -> list[ExtraFile]:
    """The runtime files of the image format (image/ref/runtime_files.py) and the WORKDIR and VOLUME folders
    that ``layers`` (the layer images, the lowest first) lack, as a layer above the image's.

    Raises:
        LayerNeedsMerge: which folders the layers lack cannot be found.
    """
    files = runtime_files(resolved.config.get("config") or {}, resolved.uri, resolved.digest)
    return [*(ExtraFile(path, content.encode()) for path, content in files.files().items()),
            *missing_folders(layers, files.directories)]


def _extra_key(extra: ExtraFile) -> bytes:
    """What names ``extra`` in the top layer's key (a file's as before folders were added)."""
    if extra.data is not None:
        return extra.path.encode() + b"\0" + extra.data + b"\0"
    return extra.path.encode() + f"\0/{extra.mode:o} {extra.uid} {extra.gid} {extra.mtime}\0".encode()


def _squash(image: AnonymousFile, options: SquashPlan, counted: Callable[[IO[bytes]], Sink],
            write: Callable[[Sink], object]) -> None:
    """Squash the layer's tar that ``write`` writes into ``image``."""
    def whole(stdin: IO[bytes]) -> None:
        out = counted(stdin)
        write(out)
        end_archive(out)
    squash_tar(image.path, options.tar2sqfs, (image.fd,), whole)
