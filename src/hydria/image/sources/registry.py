"""Images from a registry through the OCI distribution API (``docker://``).

Requests and their authentication go through image/sources/registryhttp.py; a token is kept for
the whole import, so every blob reuses it. Blobs are downloaded into the blob
cache, verified as they stream, and the merge reads each layer while it downloads
(:mod:`hydria.image.blobs.growing_blob`); layers download in merge order, as many at once as the merge needs,
up to ``HYDRIA_MAX_CONNECTIONS`` (:mod:`hydria.image.sources.pacing`).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import httpx

from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.image.blobs.cache import BlobCache, Writer, digest_of
from hydria.image.blobs.growing_blob import GrowingBlob
from hydria.image.progress import Progress
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import RegistryImage
from hydria.image.sources.httpbody import Pace, body_chunks
from hydria.image.sources.pacing import DownloadQueue
from hydria.image.sources.registryhttp import (
    STALL,
    AccessDenied,
    RegistryError,
    RegistryHttp,
    describe,
)
from hydria.image.trust.signatures import (
    MAX_SIGNATURES,
    SignatureError,
    Signed,
    decoded,
    layers_of,
    referrers_tag,
    signature_referrers,
    signature_tag,
)
from hydria.interrupt import leave_signals_to_the_main_thread
from hydria.log import Logger

__all__ = ["AccessDenied", "RegistryError", "RegistrySource"]  # the errors, where importers find them

log = Logger(__name__)

# A blob download that breaks off is resumed where it stopped this many times, plus
# HYDRIA_TRANSFER_RETRIES (enroot's GNU parallel runs a failed layer download twice more).
RESUMES = 2


class Interrupted(HydriaError):
    """A download ended because the import is ending (an interrupt, or an error elsewhere)."""


class _BrokenOff(Exception):
    """A download's connection broke after ``received`` bytes of the blob."""

    def __init__(self, received: int, error: Exception) -> None:
        super().__init__(received, error)
        self.received = received
        self.error = error


def _range_start(response: httpx.Response, offset: int) -> int:
    """Where the body of a (possibly ranged) blob ``response`` starts in the blob.

    Raises:
        RegistryError: a partial answer that is not the range asked for.
    """
    if response.status_code != 206:
        return 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    if match is None or int(match.group(1)) != offset:
        raise RegistryError(f"asked for the blob from byte {offset}, the registry sent "
                            f"{response.headers.get('Content-Range') or 'a partial answer without Content-Range'}")
    return offset


# How registries without the referrers API answer it: 404 (the OCI distribution spec), and some
# older ones 400 or 405 for a path they do not know.
NO_REFERRERS_API = (400, 404, 405)


class RegistrySource:
    """Resolves ``ref`` for a platform and fetches its blobs into ``cache``."""

    def __init__(self, ref: RegistryImage, settings: Settings, cache: BlobCache,
                 progress: Progress | None = None, *, anonymous: bool = False) -> None:
        """``anonymous``: never send credentials (the image store's imports, docs/store.md)."""
        self.ref = ref
        self.settings = settings
        self.cache = cache
        self.http = RegistryHttp(ref, settings, anonymous=anonymous, connections=settings.max_connections or None)
        self.progress = progress or Progress(live=False)
        self._pending: dict[str, Future[None]] = {}
        self._growing: dict[str, GrowingBlob] = {}
        self._descriptors: dict[str, mf.Descriptor] = {}
        self._manifests: dict[str, tuple[object, str, str]] = {}  # asked for once: digest, then resolve
        self._configs: set[str] = set()  # the images' config blobs: not layers, not in the progress lines
        self._pool = ThreadPoolExecutor(max_workers=settings.max_connections or 32,
                                        initializer=leave_signals_to_the_main_thread)
        self._closing = threading.Event()
        self._sockets: set[socket.socket] = set()  # of the blob downloads under way
        self._sockets_lock = threading.Lock()
        self._layers = DownloadQueue(self._start_layer, settings.max_connections)

    def close(self) -> None:
        """End the downloads still running (an interrupt, an error elsewhere) at once: their next
        chunk ends them, and shutting their connections down ends a read that waits on the
        network (closing a socket would not wake a thread blocked on it)."""
        self._closing.set()
        self._layers.close()
        with self._sockets_lock:
            for connection in self._sockets:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed meanwhile
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()

    # --- resolution and blobs -----------------------------------------------------------------

    @property
    def _where(self) -> str:
        """The image as messages name it."""
        return f"{self.ref.registry}/{self.ref.repository}:{self.ref.reference}"

    def resolve(self, want: mf.Platform) -> mf.ResolvedImage:
        """Find the manifest for ``want`` and fetch its config. Its ``fetch_layers`` starts
        fetching the layers the cache lacks, top layer first, so the merge (which starts at the
        top) overlaps them."""
        where = self._where
        document, media_type, digest = self._manifest(self.ref.reference, where)
        if media_type in mf.INDEX_TYPES:
            chosen = mf.choose_platform(mf.parse_index(document, where), want, where)
            document, media_type, digest = self._manifest(chosen.digest, where)
        manifest = mf.parse_manifest(document, media_type, where)
        self._configs.add(manifest.config.digest)
        self.fetch([manifest.config])
        with self.open_blob(manifest.config) as blob:
            config_where = f"the image config of {where}"
            config = mf.check_config(mf.load_json(blob.read(), config_where), config_where)
        return mf.ResolvedImage(self.ref.uri, config, manifest.layers, self.open_blob, digest,
                                lambda: self.fetch(list(reversed(manifest.layers)), wait=False))

    def digest(self, want: mf.Platform) -> str:
        """``hydria digest``: the digest of the manifest for ``want`` (the index's entry for it,
        or the tag's manifest), as the registry names it."""
        where = self._where
        document, media_type, digest = self._manifest(self.ref.reference, where)
        if media_type in mf.INDEX_TYPES:
            return mf.choose_platform(mf.parse_index(document, where), want, where).digest
        return digest

    def tag_digest(self) -> str:
        """The digest of what the reference names: an index (a multi-platform image's) or a manifest."""
        return self._manifest(self.ref.reference, self._where)[2]

    def tag_signatures(self, digest: str) -> list[Signed]:
        """The cosign signatures that the signature tag of the manifest ``digest`` holds,
        unverified (none where it is missing). Raises RegistryError, SignatureError."""
        where = f"{self.ref.registry}/{self.ref.repository}:{signature_tag(digest)}"
        document = self._document_if_any(f"manifests/{signature_tag(digest)}", mf.ACCEPT, f"the signatures {where}")
        return [] if document is None else self._payloads(document, where)

    def referrer_signatures(self, digest: str) -> list[Signed]:
        """The cosign signatures among the OCI 1.1 referrers of the manifest ``digest``,
        unverified. Raises RegistryError, SignatureError."""
        found: list[Signed] = []
        for referrer, where in self._signature_referrers(digest):
            with self.http.request(f"manifests/{referrer}", accept=mf.OCI_MANIFEST) as response:
                data = self.http.read_document(response, f"the signature {where}")
            if digest_of(data) != referrer:
                raise SignatureError(f"Checksum mismatch: the signature {where}")
            found += self._payloads(mf.load_json(data, f"the signature {where}"), where)
            if len(found) > MAX_SIGNATURES:
                raise SignatureError(f"{self.ref.registry}/{self.ref.repository} holds more than {MAX_SIGNATURES} "
                                     f"signatures of {digest}")
        return found

    def _signature_referrers(self, digest: str) -> list[tuple[str, str]]:
        """The cosign signature manifests among the referrers of ``digest`` (the referrers API,
        else the referrers tag), each with how messages name it."""
        base = f"{self.ref.registry}/{self.ref.repository}"
        where = f"the referrers of {base}@{digest}"
        index = self._document_if_any(f"referrers/{digest}", mf.OCI_INDEX, where, NO_REFERRERS_API)
        if index is None:  # a registry without the API: the index that pushing clients keep
            where = f"the referrers tag {base}:{referrers_tag(digest)}"
            index = self._document_if_any(f"manifests/{referrers_tag(digest)}", mf.OCI_INDEX, where)
            if index is None:
                return []
        return [(referrer, f"{base}@{referrer}") for referrer in signature_referrers(index, where)]

    def _document_if_any(self, path: str, accept: str, what: str, missing: tuple[int, ...] = (404,)) -> object | None:
        """The JSON document at ``path``; None where the registry answers one of ``missing``."""
        with self.http.request(path, accept=accept, allowed=missing) as response:
            if response.status_code in missing:
                return None
            data = self.http.read_document(response, what)
        document: object = mf.load_json(data, what)
        return document

    def _payloads(self, document: object, where: str) -> list[Signed]:
        """The simple-signing payloads of a signature manifest and their signatures."""
        found = []
        for blob, size, signature in layers_of(document, where):
            with self.http.request(f"blobs/{blob}") as response:
                payload = self.http.read_document(response, f"a signature payload of {where}")
            if len(payload) != size or digest_of(payload) != blob:
                raise SignatureError(f"Checksum mismatch: the signature payload {blob} of {where}")
            found.append(Signed(payload, decoded(signature)))
        return found

    def _manifest(self, reference: str, where: str) -> tuple[object, str, str]:
        """The manifest document, its media type and its digest (asked for once per source)."""
        if reference not in self._manifests:
            self._manifests[reference] = self._fetch_manifest(reference, where)
        return self._manifests[reference]

    def _fetch_manifest(self, reference: str, where: str) -> tuple[object, str, str]:
        with self.http.request(f"manifests/{reference}", accept=mf.ACCEPT) as response:
            data = self.http.read_document(response, f"the manifest of {where}")
            header = response.headers.get("Content-Type")
        if reference.startswith("sha256:") and digest_of(data) != reference:
            raise RegistryError(f"Checksum mismatch: manifest {reference} of {where}")
        document = mf.load_json(data, f"the manifest of {where}")
        return document, mf.media_type_of(document, header), digest_of(data)

    def fetch(self, descriptors: list[mf.Descriptor], *, wait: bool = True) -> None:
        """Download the blobs the cache lacks, in parallel, in the given order; without ``wait``
        they start as the merge needs them (:class:`DownloadQueue`) and :meth:`open_blob` waits
        for each one (and raises its error)."""
        missing = [d for d in dict.fromkeys(descriptors) if self.cache.lookup(d.digest) is None]
        layers = any(d.digest not in self._configs for d in descriptors)  # else the config alone: said nothing of
        if not missing:
            if layers:
                log.info("Found all layers in cache")
            return
        if layers:
            log.info("Downloading %d missing layers...", len(missing))
        if wait:
            pending = [self._pool.submit(self._download, descriptor, GrowingBlob()) for descriptor in missing]
            for future in pending:
                future.result()
            return
        for descriptor in missing:
            self._descriptors[descriptor.digest] = descriptor
            self._growing[descriptor.digest] = GrowingBlob(self._layers.waited)
        self._layers.add(descriptor.digest for descriptor in missing)

    def _start_layer(self, digest: str) -> None:
        self._pending[digest] = self._pool.submit(self._download, self._descriptors[digest],
                                                  self._growing[digest], self._layers.ended)

    def _download(self, descriptor: mf.Descriptor, growing: GrowingBlob,
                  ended: Callable[[], None] | None = None) -> None:
        try:
            self._download_to_cache(descriptor, growing)
        except BaseException as error:
            growing.ended(error)
            raise
        else:
            growing.ended()
        finally:
            if ended is not None:
                ended()

    def _download_to_cache(self, descriptor: mf.Descriptor, growing: GrowingBlob) -> None:
        started = time.monotonic()  # HYDRIA_TRANSFER_TIMEOUT counts every try

        def download(out: Writer) -> None:
            self.progress.start(descriptor.digest, descriptor.size, shown=descriptor.digest not in self._configs)
            received = 0
            resumes = RESUMES + self.settings.transfer_retries
            for attempt in range(resumes + 1):
                try:
                    self._download_from(descriptor, received, out, started)
                    return
                except _BrokenOff as broken:
                    if self._closing.is_set():
                        raise Interrupted(f"the download of {descriptor.digest} was stopped") from None
                    received, error = broken.received, describe(broken.error, self.http.stall)
                    if attempt < resumes:
                        log.warning("Download of %s broke off after %d bytes (%s); resuming",
                                    descriptor.digest, received, error)
                        if self._closing.wait(min(0.5 * 2 ** attempt, 10)):
                            raise Interrupted(f"the download of {descriptor.digest} was stopped")
            raise RegistryError(f"Download of {descriptor.digest} failed after {received} of {descriptor.size} "
                                f"bytes, {resumes + 1} tries: {error}",
                                hint="check the network; HYDRIA_TRANSFER_RETRIES adds tries")

        try:
            self.cache.fetch(descriptor.digest, download, growing, descriptor.size)
        except HydriaError as e:
            e.message = f"{self.ref.registry}/{self.ref.repository}: {e.message}"
            raise
        self.progress.finish(descriptor.digest)

    def _download_from(self, descriptor: mf.Descriptor, offset: int, out: Writer, started: float) -> None:
        """Write the blob from byte ``offset`` on to ``out`` (which has the bytes before).

        Raises:
            _BrokenOff: the connection broke; how many bytes ``out`` has now.
        """
        received = offset
        pace = Pace(self.settings.transfer_timeout, STALL, started)
        try:
            with self.http.request(f"blobs/{descriptor.digest}", offset=offset) as response, self._tracked(response):
                skip = offset - _range_start(response, offset)
                for chunk in body_chunks(response):
                    if self._closing.is_set():
                        raise Interrupted(f"the download of {descriptor.digest} was stopped")
                    if skip:  # the registry sent bytes before the offset (it ignored the range)
                        chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                    out.write(chunk)
                    received += len(chunk)
                    self.progress.advance(descriptor.digest, len(chunk))
                    slow = pace.too_slow(len(chunk))
                    if slow:
                        raise RegistryError(f"downloading {descriptor.digest}: {slow}",
                                            hint="the registry is stalled or very slow")
        except httpx.TransportError as error:
            raise _BrokenOff(received, error) from None

    @contextmanager
    def _tracked(self, response: httpx.Response) -> Iterator[None]:
        """Keep the response's socket where :meth:`close` can shut it down, while it is read."""
        stream = response.extensions.get("network_stream")
        connection = stream.get_extra_info("socket") if stream is not None else None
        if connection is None:
            yield
            return
        with self._sockets_lock:
            self._sockets.add(connection)
        if self._closing.is_set():  # close() ran before the socket was known
            connection.shutdown(socket.SHUT_RDWR)
        try:
            yield
        finally:
            with self._sockets_lock:
                self._sockets.discard(connection)

    @contextmanager
    def open_blob(self, descriptor: mf.Descriptor) -> Iterator[mf.Blob]:
        """A blob still downloading (read as it arrives), or a cached one (one another user
        wrote is verified as it is read)."""
        self._layers.need(descriptor.digest)
        growing = self._growing.pop(descriptor.digest, None)
        pending = self._pending.pop(descriptor.digest, None)
        following = growing.follow() if growing is not None else None
        if following is not None:
            with following:  # its end is the download's verified end, or its error
                try:
                    yield following
                except Exception as error:  # not an interrupt: that must not wait for the download
                    cause = following.download_error()
                    if cause is not None and cause is not error:
                        raise cause from None
                    raise
            return
        if pending is not None:
            pending.result()
        found = self.cache.lookup(descriptor.digest)
        if found is None:
            raise RegistryError(f"blob {descriptor.digest} vanished from the cache during the import")
        with self.cache.reading(found, descriptor.digest) as blob:
            yield blob
