"""One self-contained image file made of a layered image (image/kept/layered_import.py), for where one
file is asked for: ``hydria import -o`` of an image that the image store or the cache keeps
layered, ``hydria bundle`` and ``hydria create --unpack`` of a layered image.

Each layer image is read as a tar by ``sqfs2tar`` (squashfs-tools-ng), the topmost first, and
image/squash/flatten.py merges them as an import merges a registry image's layers, reading the overlay's
marks (a character device 0/0, ``user.overlay.opaque``) as the deletions and opaque folders they
are; tar2sqfs squashes the result. Nothing is downloaded, nothing unpacked to disk: the file shows
what a start of the layered image shows. ``squashfs_tar`` reads any image file so (a bundle's
root file system is one).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from functools import partial
from io import BufferedReader
from pathlib import Path
from typing import cast

from hydria.anonfile import AnonymousFile, anonymous_file
from hydria.errors import InvalidImage, MissingTool
from hydria.image.squash.flatten import LayerContent, LayerStream, flatten
from hydria.image.squash.squashfs import SquashPlan, squash_tar, squashed
from hydria.log import Logger
from hydria.runtime.layered import LayeredImageError, layer_paths
from hydria.runtime.rootfs import image_layers

log = Logger(__name__)

LAYER_READER = "sqfs2tar"


def write_merged(layered: str, image: AnonymousFile, options: SquashPlan) -> None:
    """Write the layered image ``layered`` merged into the squashfs ``image``.

    Raises:
        InvalidImage: the layered image or one of its layer images cannot be read.
        MissingTool: sqfs2tar is not installed.
        HydriaError: as tar2sqfs's and the merge's.
    """
    try:
        paths = layer_paths(layered)
    except (OSError, LayeredImageError) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise InvalidImage(f"cannot read the layered image {layered}: {reason}",
                           hint="import the image again") from None
    layers = [LayerStream(path, partial(_layer_tar, path), overlay_format=True) for path in reversed(paths)]
    log.info("Merging the %d layer images of %s into one image file", len(layers), layered)
    squashed(image, options, lambda file, tar2sqfs: squash_tar(
        file.path, tar2sqfs, (file.fd,), lambda stdin: flatten(layers, [], stdin)))


def one_file(image: Path, near: Path, options: SquashPlan, stack: ExitStack) -> tuple[Path, tuple[int, ...]]:
    """``image`` as one squashfs file: itself; or where it is a layered image, the image merged
    into a file without a name in ``near``'s folder, for as long as ``stack`` lasts. Also the
    descriptors that a process reading the file must inherit.

    Raises: as :func:`write_merged`.
    """
    if image_layers(str(image)) == [str(image)]:
        return image, ()
    merged = stack.enter_context(anonymous_file(near))
    write_merged(str(image), merged, options)
    return Path(merged.path), (merged.fd,)


def _layer_tar(path: str) -> AbstractContextManager[LayerContent]:
    return squashfs_tar(path, "the layer image",
                        hint="the image's layer images are damaged or missing: import the image again")


@contextmanager
def squashfs_tar(path: str, what: str, *, xattrs: bool = True, held: tuple[int, ...] = (),
                 hint: str | None = None) -> Iterator[BufferedReader]:
    """The squashfs image ``path`` (``what`` it is, for errors) as an uncompressed tar, read from
    sqfs2tar as it writes it, with its extended attributes unless ``xattrs`` is false; ``held``:
    the descriptors sqfs2tar must inherit to open ``path``.

    Raises:
        InvalidImage: sqfs2tar cannot read it (missing, truncated or damaged).
        MissingTool: sqfs2tar is not installed.
    """
    with tempfile.TemporaryFile() as errors:
        try:
            reader = subprocess.Popen([LAYER_READER, *(() if xattrs else ("--no-xattr",)), path],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, pass_fds=held)
        except FileNotFoundError:
            raise MissingTool(LAYER_READER, hint="install the Debian package squashfs-tools-ng") from None
        assert reader.stdout is not None
        with reader.stdout:
            try:
                yield cast(BufferedReader, reader.stdout)
                reader.stdout.read()  # what follows the archive's end: sqfs2tar must not stop writing
            except BaseException:
                reader.kill()
                reader.wait()
                raise
        if reader.wait() != 0:
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip().splitlines()
            raise InvalidImage(f"cannot read {what} {path}: "
                               f"{said[-1] if said else f'{LAYER_READER} exited with {reader.returncode}'}",
                               hint=hint)
