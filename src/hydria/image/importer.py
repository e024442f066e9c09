"""``import``: reference -> source -> cache -> flatten -> squashfs, with nothing half-written.

The image file is an anonymous file (:mod:`hydria.anonfile`) that gets its name only when
complete, so an import that fails or is killed at any point leaves no file behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hydria.anonfile import AnonymousFile, anonymous_file, link_or_copy
from hydria.config import Settings
from hydria.errors import AlreadyExists, HydriaError, InvalidArgument, InvalidImage
from hydria.image.blobs.cache import BlobCache
from hydria.image.blobs.compression import Prefetcher, decompressed
from hydria.image.blobs.growing_blob import FollowingReader
from hydria.image.kept.layered_import import squash_layers, write_layered
from hydria.image.kept.store import ImageStore
from hydria.image.kept.user_cache import CachedImage, ImageCache
from hydria.image.progress import Progress
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import EngineImage, ImageReference, LocalImage, RegistryImage, parse
from hydria.image.ref.runtime_files import runtime_files
from hydria.image.squash.flatten import ExtraFile, LayerContent, LayerStream, flatten
from hydria.image.squash.layer_image import LayerNeedsMerge
from hydria.image.squash.one_file import write_merged
from hydria.image.squash.squashfs import SquashPlan, squash_plan, squash_tar, squashed
from hydria.image.trust import policy
from hydria.interrupt import terminate_as_interrupt
from hydria.log import Logger
from hydria.paths import check_output_folder
from hydria.runtime.layered import layered_text
from hydria.units import format_size

if TYPE_CHECKING:
    from hydria.image.sources.registry import RegistrySource

log = Logger(__name__)


class OutputExists(AlreadyExists):
    """The import's output file is there already."""


def default_output(ref: ImageReference, cwd: Path) -> str:
    """The image file's name when no --output is given: an OCI layout's after the name it gives
    its image (hydria/image/ref/reference.py)."""
    if isinstance(ref, LocalImage):
        from hydria.image.sources.local import layout_name

        return ref.default_output(layout_name(ref, cwd))
    return ref.default_output()


def output_path(ref: ImageReference, output: str | None, cwd: Path) -> Path:
    """The absolute output path; its directory must exist and the file must not.

    Raises:
        HydriaError: AlreadyExists, NotFound, PermissionProblem.
    """
    target = Path(os.path.abspath(cwd / (output or default_output(ref, cwd))))
    target = target.parent.resolve() / target.name
    try:
        if target.exists() or target.is_symlink():
            raise OutputExists(target, hint="import never replaces a file, as enroot's: remove it, or choose another --output")
    except PermissionError:
        pass  # a folder on the way that this user may not search: the folder's check says so
    check_output_folder(target)
    return target


def import_image(uri: str, settings: Settings, *, output: str | None = None, arch: str | None = None,
                 cwd: Path | None = None, in_place: bool = False,
                 on_store_miss: Callable[[], None] | None = None) -> Path:
    """Import ``uri`` into a squashfs image file and return its path: the output, or, with
    ``in_place``, the image store's or the image kept in the cache when the output is on another
    file system (a Slurm step reads it there rather than copy gigabytes into its scratch space;
    nobody may write to it). ``on_store_miss`` runs when there is an image store that lacks the
    image (it may raise, to have the store's owner import it first: the Slurm plugin).

    Raises:
        HydriaError: bad reference, unreachable source, bad content, or an output problem.
    """
    cwd = cwd or Path.cwd()
    ref = parse(uri, path_exists=_local_path_exists(uri, cwd))
    rule = policy.check(ref, settings)
    target = output_path(ref, output, cwd)
    want = mf.parse_platform(arch)
    options = squash_plan(settings.squash_options, settings.max_processors)
    with ExitStack() as stack:
        progress = _watched(stack)
        images = ImageCache(settings.cache_path, settings.cache_images)
        keeping = settings.cache_images > 0 and images.usable()
        if isinstance(ref, RegistryImage):
            # The manifest's digest first: an image the store or the cache has needs nothing else.
            source = _registry_source(ref, settings, stack, progress)
            digest = source.digest(want)
            policy.check_source(rule, ref, source, digest)  # before the store or the cache serves it
            store = ImageStore.configured(settings)
            stored = _from_store(store, source.ref.uri, digest, want, settings, in_place) if store is not None else None
            if stored is not None:
                return _deliver(stored, target, in_place)
            kept = images.entry(ref.uri, digest, settings.squash_options, want) if keeping else None
            if not in_place:  # one file: the one kept, else one merged of a kept layered image, else imported
                found = _kept(kept, target, in_place) if kept is not None else None
                if (found := found or _merged_from_layers(store, source.ref.uri, digest, want, settings, target,
                                                          options)) is not None:
                    return found
            if store is not None and on_store_miss is not None:
                on_store_miss()
            layered = layered_entry(ref.uri, digest, want, settings) if in_place else None
            for entry in (layered, kept) if in_place else ():
                if entry is not None and (found := _kept(entry, target, in_place)) is not None:
                    return found
            resolved = _resolve(source.resolve, want)
            if layered is not None:
                try:
                    return make_layered(resolved, layered, settings, progress)
                except LayerNeedsMerge as e:
                    log.info("Importing the image merged into one file: %s", e.message)
        else:
            resolved = _resolve(_open_source(ref, settings, cwd, stack, progress), want)
            kept = images.entry(resolved.uri, resolved.digest, settings.squash_options, want) \
                if resolved.digest and keeping else None
            if kept is not None and (found := _kept(kept, target, in_place)) is not None:
                return found
        return write_image(resolved, target, options, kept, progress=progress)


def layered_images(settings: Settings) -> bool:
    """Whether imports keep layered images: ``HYDRIA_LAYERED_IMAGES``, and squash options that
    tar2sqfs writes (those that repack with mksquashfs make one file)."""
    return settings.layered_images and squash_plan(settings.squash_options, 1).mksquashfs is None


def layered_entry(uri: str, digest: str, platform: mf.Platform, settings: Settings) -> CachedImage | None:
    """Where the cache keeps the image ``uri`` (its manifest's ``digest``) as a layered image;
    None where layered images are off (:func:`layered_images`) or the cache keeps no images."""
    if not layered_images(settings):
        return None
    images = ImageCache(settings.cache_path, settings.cache_images)
    if settings.cache_images <= 0 or not images.usable():
        return None
    return images.entry(uri, digest, settings.squash_options, platform, layered=True)


def make_layered(resolved: mf.ResolvedImage, kept: CachedImage, settings: Settings,
                 progress: Progress | None = None) -> Path:
    """Make ``resolved`` the layered image ``kept`` in the cache (which the caller found
    lacking it: ``kept.find()``), squashing only the layers the cache lacks; its path.

    Raises:
        LayerNeedsMerge: a layer that cannot stand alone (the caller merges the image instead).
        HydriaError: as an import's.
    """
    shown = progress or Progress(live=False)
    return write_layered(resolved, kept, squash_plan(settings.squash_options, settings.max_processors),
                         settings.squash_options, shown, _layer_opener, lambda out: _Counted(out, shown))


def _into_store(store: ImageStore, source: RegistrySource, digest: str, want: mf.Platform, settings: Settings) -> Path:
    """The store's entry of ``digest``, written unless it is there: layered where imports keep
    layered images (a new version costs its new layers), else (or where a layer cannot stand
    alone) one image file."""
    uri, squash_options = source.ref.uri, settings.squash_options
    layered = layered_images(settings)
    found = _stored(store, uri, digest, want, squash_options, layered)
    if found is not None:
        return found
    options = squash_plan(squash_options, settings.max_processors)
    progress = source.progress
    if layered:
        def write_layered(entry: AnonymousFile) -> None:  # holding the store's lock: waiters fetch nothing
            names = squash_layers(_resolve(source.resolve, want), store, options, squash_options, progress,
                                  _layer_opener, lambda out: _Counted(out, progress))
            os.write(entry.fd, layered_text(names))
            progress.squashed()
        try:
            return store.publish(store.key(uri, digest, squash_options, want, layered=True), uri, digest,
                                 write_layered, layered=True)
        except LayerNeedsMerge as e:
            log.info("Importing the image merged into one file: %s", e.message)

    def write(image: AnonymousFile) -> None:
        _squash(_resolve(source.resolve, want), image, options, progress)
    return store.publish(store.key(uri, digest, squash_options, want), uri, digest, write)


def import_into_store(uri: str, settings: Settings, *, arch: str | None = None,
                      tell: Callable[[str], None] | None = None) -> Path:
    """``hydria store import``: the store's entry of registry image ``uri``, imported unless it
    is there (``tell``: see ImageStore). The store keeps only images that anyone may pull: the
    registry is asked without credentials, so whoever learns an entry's path reads nothing the
    registry would not give them (docs/store.md). Raises HydriaError, also when this user does
    not write the store or the registry wants credentials for the image."""
    from hydria.image.sources.registry import AccessDenied

    store = ImageStore(settings.store_path, settings.store_owner, tell)
    store.require_writer()
    store.check()
    store.seal_unmarked()
    ref = parse(uri)
    if not isinstance(ref, RegistryImage):
        raise InvalidArgument(uri, hint="the image store keeps registry images (docker://...)")
    rule = policy.check(ref, settings)
    with ExitStack() as stack:
        source = _registry_source(ref, settings, stack, _watched(stack), anonymous=True)
        want = mf.parse_platform(arch)
        try:
            digest = source.digest(want)
            policy.check_source(rule, ref, source, digest)
            stored = _into_store(store, source, digest, want, settings)
        except AccessDenied as e:
            raise AccessDenied(f"{ref.uri} cannot be pulled without credentials ({e.message}), and the image "
                               "store keeps only images that anyone may pull",
                               hint="each user imports it with their own credentials (a Slurm step does so by "
                                    "itself); docs/store.md") from None
    log.info("Found the image in the image store: %s", stored)
    target = store.prune_target(settings.store_prune_above, settings.store_prune_to)
    if target is not None:
        gone = store.prune(target)
        log.info("Pruned the image store to %s: %d image(s) least recently used", format_size(target), len(gone))
    return stored


def check_store_import(settings: Settings) -> str:
    """What ``hydria store import`` needs, checked as the store's owner without importing: the
    store, its images folder writable, the owner's blob cache usable. Returns a summary; raises
    HydriaError with the fix (``hydria store check``, and ``doctor`` for the Slurm plugin's imports)."""
    store = ImageStore(settings.store_path, settings.store_owner)
    store.require_writer()
    store.check()
    if not os.access(store.images, os.W_OK | os.X_OK):
        raise HydriaError(f"{store.images} cannot be written by its owner",
                          hint="the owner runs: hydria store init")
    cache = blob_cache(settings)
    return f"the store {store.root} and the blob cache {cache.root} are ready"


def _watched(stack: ExitStack) -> Progress:
    """An import's progress display, with SIGINT, SIGTERM and SIGHUP ending the import."""
    stack.enter_context(terminate_as_interrupt(ctrl_c=True))
    progress = Progress()
    stack.callback(progress.close)
    return progress


def _resolve(resolve: Callable[[mf.Platform], mf.ResolvedImage], want: mf.Platform) -> mf.ResolvedImage:
    """The image for ``want``. An image of one architecture (no index to choose from) that is not
    the one asked for with --arch is refused before any layer is downloaded (enroot imports it
    with a warning: a job would then fail with 'Exec format error'); where the architecture is
    this machine's default, the warning stays, as enroot's.

    Raises:
        ManifestError: the image is for another architecture than --arch named.
    """
    resolved = resolve(want)
    found = resolved.config.get("architecture")
    if found and found != want.architecture:
        if want.asked:
            raise mf.ManifestError(f"the image is for {found} only, not {want.architecture}",
                                   hint=f"it has no {want.architecture} variant: import it without --arch "
                                        f"(or --arch {found}), or choose an image built for {want.architecture}")
        log.warning("Image architecture doesn't match the requested one: %s != %s", found, want.architecture)
    return resolved


def _from_store(store: ImageStore, uri: str, digest: str, want: mf.Platform, settings: Settings,
                in_place: bool) -> Path | None:
    """The store's image of ``digest``, the manifest that this user's registry request named: a
    layered image only ``in_place`` (an output file must be one self-contained image)."""
    found = _stored(store, uri, digest, want, settings.squash_options, in_place)
    if found is not None:
        log.info("Found the image in the image store: %s", found)
    return found


def _stored(store: ImageStore, uri: str, digest: str, want: mf.Platform, squash_options: str,
            layered: bool) -> Path | None:
    """The store's entry of the image, the layered one first where ``layered`` may be taken."""
    for as_layers in (True, False) if layered else (False,):
        found = store.lookup(store.key(uri, digest, squash_options, want, layered=as_layers))
        if found is not None:
            return found
    return None


def _merged_from_layers(store: ImageStore | None, uri: str, digest: str, want: mf.Platform, settings: Settings,
                        target: Path, options: SquashPlan) -> Path | None:
    """``target`` made of the layered image that the image store or the cache keeps of the image
    (the store's first), merged into one file without a download (image/squash/one_file.py); None
    where neither keeps one, or where its layer images went meanwhile (said in the log)."""
    found = store.lookup(store.key(uri, digest, settings.squash_options, want, layered=True)) if store else None
    if found is None and (entry := layered_entry(uri, digest, want, settings)) is not None:
        found = entry.find()
    if found is None:
        return None
    try:
        with anonymous_file(target) as image:
            write_merged(str(found), image, options)
            if not image.commit():
                raise OutputExists(target)
    except InvalidImage as e:
        log.warning("%s; importing the image from its registry", e.message)
        return None
    log.info("Merged the kept layered image %s into %s", found, target)
    return target


def _kept(kept: CachedImage, target: Path, in_place: bool) -> Path | None:
    """The kept image at ``target`` (or in place, as :meth:`CachedImage.link_to`), if there is one."""
    try:
        found = kept.link_to(target, in_place=in_place)
    except FileExistsError:
        raise OutputExists(target) from None
    if found is not None:
        log.info("Found the image in cache")
        if found != target:
            log.info("Using the kept image %s", found)
    return found


def _deliver(stored: Path, target: Path, in_place: bool) -> Path:
    """The store's image where the caller wants it: in place, or at ``target`` (a hardlink where
    the kernel allows one, else a copy)."""
    if in_place:
        return stored
    try:
        link_or_copy(stored, target)
    except FileExistsError:
        raise OutputExists(target) from None
    return target


def image_digest(uri: str, settings: Settings, *, arch: str | None = None) -> str:
    """The registry's digest (``sha256:...``) of the manifest of ``uri`` for ``arch``.

    Raises:
        HydriaError: not a ``docker://`` reference, or the registry's errors.
    """
    if not uri.startswith("docker://"):
        raise InvalidArgument(uri, hint="digest takes docker:// images")
    ref = parse(uri)
    assert isinstance(ref, RegistryImage)
    with ExitStack() as stack:
        return _registry_source(ref, settings, stack, Progress(live=False)).digest(mf.parse_platform(arch))


def blob_cache(settings: Settings) -> BlobCache:
    """The blob cache, with the user's own default cache for entries that cannot be used there
    (a shared cache where another user planted something)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return BlobCache(settings.cache_path, private=os.path.join(home, "hydria"))


def _local_path_exists(uri: str, cwd: Path) -> bool:
    rest = uri.partition("://")[2]
    return bool(rest) and (cwd / rest).exists()


def _registry_source(ref: RegistryImage, settings: Settings, stack: ExitStack, progress: Progress, *,
                     anonymous: bool = False) -> RegistrySource:
    from hydria.image.sources.registry import RegistrySource

    source = RegistrySource(ref, settings, blob_cache(settings), progress, anonymous=anonymous)
    stack.callback(source.close)
    return source


def _open_source(ref: ImageReference, settings: Settings, cwd: Path, stack: ExitStack,
                 progress: Progress) -> Callable[[mf.Platform], mf.ResolvedImage]:
    if isinstance(ref, RegistryImage):
        return _registry_source(ref, settings, stack, progress).resolve
    if isinstance(ref, LocalImage):
        from hydria.image.sources.local import open_local

        return open_local(ref, cwd, stack)
    assert isinstance(ref, EngineImage)
    from hydria.image.sources.engine import open_engine

    return open_engine(ref, settings, stack)


def write_image(resolved: mf.ResolvedImage, target: Path, options: SquashPlan, kept: CachedImage | None = None,
                *, progress: Progress | None = None) -> Path:
    """Write ``resolved`` as a squashfs at ``target`` (which must not exist), flattened and
    squashed, then keep it as ``kept`` in the cache (the caller found no kept image there)."""
    with anonymous_file(target) as image:
        _squash(resolved, image, options, progress or Progress(live=False))
        if not image.commit():
            raise OutputExists(target)
    if kept is not None:
        kept.keep(target)
    return target


def _squash(resolved: mf.ResolvedImage, image: AnonymousFile, options: SquashPlan, progress: Progress) -> None:
    squashed(image, options, lambda file, tar2sqfs: _flatten_into(resolved, file, tar2sqfs, progress))


def _flatten_into(resolved: mf.ResolvedImage, image: AnonymousFile, options: list[str], progress: Progress) -> None:
    """The image's layers, merged into one tree, written as a squashfs by tar2sqfs into ``image``."""
    files = runtime_files(resolved.config.get("config") or {}, resolved.uri, resolved.digest)
    extras = [ExtraFile(path, content.encode()) for path, content in files.files().items()]
    layers = [LayerStream(d.digest, _layer_opener(resolved, d)) for d in reversed(resolved.layers)]
    resolved.fetch_layers()
    progress.squashing()
    stats = squash_tar(image.path, options, (image.fd,),
                       lambda stdin: flatten(layers, extras, _Counted(stdin, progress), ensure_dirs=files.directories),
                       written=progress.merge_ended)
    progress.squashed()
    log.debug("flattened %d entries, %d bytes, %d whiteouts; dropped %d device nodes",
              stats.entries, stats.bytes, stats.whiteouts, stats.devices_dropped)


class _Counted:
    """The image stream, telling ``progress`` how much of the image was merged."""

    def __init__(self, stream: IO[bytes], progress: Progress) -> None:
        self._stream = stream
        self._progress = progress

    def write(self, data: bytes | memoryview) -> int:
        count = self._stream.write(data)
        self._progress.merged(len(data))
        return count


def _layer_opener(resolved: mf.ResolvedImage, descriptor: mf.Descriptor) -> Callable[[], AbstractContextManager[LayerContent]]:
    @contextmanager
    def open_layer() -> Iterator[LayerContent]:
        with resolved.open_blob(descriptor) as raw:
            # The prefetcher also reads the blob to its end after the content (a tar ends before
            # its blob, and a forged blob may read as an empty archive): the digest check at EOF
            # always runs.
            reader = Prefetcher(decompressed(raw), raw)
            try:
                yield reader
            except BaseException:
                if isinstance(raw, FollowingReader):
                    raw.abandon()  # its thread stops waiting for the download (Ctrl-C ends at once)
                reader.cancel()
                raise
            reader.finish()
    return open_layer
