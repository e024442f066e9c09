"""``hydria push``: an image into a registry over the OCI distribution API, with the
authentication and credentials that imports use (image/sources/registryhttp.py).

Blobs first, the manifest last (so nobody pulls a manifest whose blobs are not there yet):

* a blob the repository has already (``HEAD``) is not sent again;
* a blob that another repository of the same registry has (the base image's) is mounted from it
  (``POST ...?mount=DIGEST&from=REPOSITORY``), where the registry allows it, and sent otherwise;
* a blob is sent in chunks (``PATCH``) of CHUNK bytes, each retried where the connection breaks
  (``HYDRIA_TRANSFER_RETRIES`` more times, as downloads), then closed with its digest (``PUT``),
  which the registry checks.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial

import httpx

from hydria.config import Settings
from hydria.image.blobs.cache import digest_of
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import RegistryImage
from hydria.image.sources.registryhttp import RegistryError, RegistryHttp
from hydria.image.trust.signatures import SIGNATURE_ANNOTATION, SIMPLE_SIGNING, signature_tag
from hydria.log import Logger
from hydria.record import Record
from hydria.units import format_size

log = Logger(__name__)
CHUNK = 16 << 20
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"  # a signature manifest's empty config, as cosign's


class PushBlob(Record):
    descriptor: mf.Descriptor
    open: Callable[[], AbstractContextManager[mf.Blob]]
    mount_from: str | None = None  # a repository of the same registry that has it


class PushImage(Record):
    manifest: bytes
    blobs: tuple[PushBlob, ...]  # the layers and the config


class Pushed(Record):
    digest: str
    sent: int  # blobs uploaded
    skipped: int  # blobs the registry had, or mounted from another repository


def push(image: PushImage, ref: RegistryImage, settings: Settings, tell: Callable[[str], None]) -> Pushed:
    """Push ``image`` to ``ref`` (its tag, ``latest`` by default). Raises HydriaError."""
    http = RegistryHttp(ref, settings)
    try:
        sent = skipped = 0
        for blob in image.blobs:
            if _present(http, blob.descriptor.digest) or _mounted(http, blob):
                skipped += 1
                tell(f"{blob.descriptor.digest[7:19]}  already there")
                continue
            _upload(http, blob, settings)
            sent += 1
            tell(f"{blob.descriptor.digest[7:19]}  sent {format_size(blob.descriptor.size)}")
        tag = ref.tag or "latest"
        with http.request(f"manifests/{tag}", method="PUT", content=image.manifest,
                          headers={"Content-Type": mf.OCI_MANIFEST}) as response:
            digest = str(response.headers.get("Docker-Content-Digest") or digest_of(image.manifest))
        return Pushed(digest, sent, skipped)
    finally:
        http.close()


def push_signature(ref: RegistryImage, settings: Settings, digest: str, payload: bytes, signature: str) -> None:
    """Add a cosign signature of the manifest ``digest`` where cosign keeps them (the tag
    ``sha256-HEX.sig``: the signatures there stay, as cosign appends). Raises HydriaError."""
    http = RegistryHttp(ref, settings)
    tag = signature_tag(digest)
    try:
        with http.request(f"manifests/{tag}", accept=mf.OCI_MANIFEST, allowed=(404,)) as response:
            before = mf.load_json(http.read_document(response, f"the signatures {tag}"), tag) \
                if response.status_code != 404 else {}
        config = b"{}"
        layers = [layer for layer in (before.get("layers") or []) if isinstance(layer, dict)] \
            if isinstance(before, dict) else []
        for content, media_type in ((config, CONFIG_TYPE), (payload, SIMPLE_SIGNING)):
            blob = PushBlob(mf.Descriptor(digest_of(content), len(content), media_type), partial(_bytes, content))
            if not _present(http, blob.descriptor.digest):
                _upload(http, blob, settings)
        if not any(layer.get("digest") == digest_of(payload) for layer in layers):
            layers.append({"mediaType": SIMPLE_SIGNING, "digest": digest_of(payload), "size": len(payload),
                           "annotations": {SIGNATURE_ANNOTATION: signature}})
        manifest = json.dumps({"schemaVersion": 2, "mediaType": mf.OCI_MANIFEST,
                               "config": {"mediaType": CONFIG_TYPE, "digest": digest_of(config), "size": len(config)},
                               "layers": layers}).encode()
        with http.request(f"manifests/{tag}", method="PUT", content=manifest,
                          headers={"Content-Type": mf.OCI_MANIFEST}):
            pass
    finally:
        http.close()


@contextmanager
def _bytes(content: bytes) -> Iterator[mf.Blob]:
    yield io.BytesIO(content)


def _present(http: RegistryHttp, digest: str) -> bool:
    with http.request(f"blobs/{digest}", method="HEAD", allowed=(404,)) as response:
        return response.status_code == 200


def _mounted(http: RegistryHttp, blob: PushBlob) -> bool:
    """Mount the blob from another repository of the registry; False where it cannot."""
    if not blob.mount_from or blob.mount_from == http.ref.repository:
        return False
    params = f"?mount={blob.descriptor.digest}&from={blob.mount_from}"
    with http.request(f"blobs/uploads/{params}", method="POST", allowed=(404, 403, 401)) as response:
        if response.status_code == 201:
            return True
        location = response.headers.get("Location")
    if response.status_code == 202 and location:  # the registry opened an upload instead: close it
        with http.request(location, method="DELETE", allowed=tuple(range(400, 600))):
            pass
    return False


def _upload(http: RegistryHttp, blob: PushBlob, settings: Settings) -> None:
    with http.request("blobs/uploads/", method="POST") as response:
        location = _location(response)
    offset = 0
    with blob.open() as content:
        for chunk in _chunks(content):
            location = _send_chunk(http, location, chunk, offset, settings)
            offset += len(chunk)
    if offset != blob.descriptor.size:
        raise RegistryError(f"blob {blob.descriptor.digest}: read {offset} bytes, the manifest says "
                            f"{blob.descriptor.size}", hint="the image is damaged: build or import it again")
    url = httpx.URL(http.url(location)).copy_merge_params({"digest": blob.descriptor.digest})
    with http.request(str(url), method="PUT", headers={"Content-Length": "0"}, content=b""):
        pass


def _chunks(content: mf.Blob) -> Iterator[bytes]:
    while True:
        chunk = content.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _send_chunk(http: RegistryHttp, location: str, chunk: bytes, offset: int, settings: Settings) -> str:
    """PATCH one chunk, again where the connection breaks; the upload's next location."""
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(chunk)),
               "Content-Range": f"{offset}-{offset + len(chunk) - 1}"}
    attempt = 0
    while True:
        try:
            with http.request(location, method="PATCH", headers=headers, content=chunk) as response:
                return _location(response)
        except RegistryError as e:
            attempt += 1
            if attempt > settings.transfer_retries + 2 or not _broken(e):
                raise
            log.warning("Sending bytes %d-%d broke off (%s); again", offset, offset + len(chunk) - 1, e)
            time.sleep(min(0.5 * 2 ** attempt, 10))


def _broken(error: RegistryError) -> bool:
    """A connection that broke (worth another try), not a refusal."""
    return error.message.startswith(("Could not talk", "Could not connect")) or "returned error code: 5" in error.message


def _location(response: httpx.Response) -> str:
    location = response.headers.get("Location")
    if not location:
        raise RegistryError(f"the registry answered {response.request.method} {response.request.url} without "
                            "an upload location", hint="is it an OCI distribution registry?")
    return str(location)



def from_oci_layout(folder: str, name: str | None) -> PushImage:
    """The image of an OCI image layout (``--oci`` of hydria build, skopeo, podman save): the
    manifest named ``name`` (``org.opencontainers.image.ref.name``), or its only one."""
    import json
    import os
    from contextlib import contextmanager

    from hydria.errors import InvalidImage
    from hydria.image.blobs.cache import VerifyingReader

    blobs = os.path.join(folder, "blobs", "sha256")

    def read(digest: str) -> bytes:
        try:
            with open(os.path.join(blobs, digest.partition(":")[2]), "rb") as handle:
                data = handle.read(32 << 20)
        except OSError as e:
            raise InvalidImage(f"{folder}: blob {digest}: {e.strerror}") from None
        if digest_of(data) != digest:
            raise InvalidImage(f"{folder}: blob {digest} does not match its digest")
        return data

    try:
        with open(os.path.join(folder, "index.json"), "rb") as handle:
            index = json.loads(handle.read(32 << 20))
        entries = [e for e in index.get("manifests", []) if e.get("mediaType") == mf.OCI_MANIFEST
                   and (name is None or (e.get("annotations") or {}).get(mf.REF_ANNOTATION) == name)]
    except (OSError, ValueError, AttributeError) as e:
        raise InvalidImage(f"{folder} is not an OCI image layout: {e}") from None
    if len(entries) != 1:
        which = f"named {name!r}" if name else "(the layout holds several: name one, oci://DIR:NAME)"
        raise InvalidImage(f"{folder}: {len(entries)} image manifests {which}")
    manifest_data = read(str(entries[0]["digest"]))
    manifest = mf.parse_manifest(mf.load_json(manifest_data, folder), mf.OCI_MANIFEST, folder)

    def opener(descriptor: mf.Descriptor) -> Callable[[], AbstractContextManager[mf.Blob]]:
        @contextmanager
        def open_blob() -> Iterator[mf.Blob]:
            with open(os.path.join(blobs, descriptor.digest.partition(":")[2]), "rb") as handle:
                yield VerifyingReader(handle, descriptor.digest, folder)
        return open_blob

    return PushImage(manifest_data, tuple(PushBlob(d, opener(d)) for d in (*manifest.layers, manifest.config)))
