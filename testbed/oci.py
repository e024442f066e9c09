"""Write container images: layers, config, manifests, in every form hydria imports from.

One :class:`Image` can be written as an OCI layout directory, an OCI archive, a ``docker save``
archive, or pushed to a registry. Layers are tar streams built by the caller (see
:mod:`testbed.tarbuild`); this module compresses, hashes and packages them. Everything is
deterministic, so the same recipe gives the same digests.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import zstandard

Compression = Literal["gzip", "zstd", "none"]
ManifestFormat = Literal["oci", "docker"]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER_TYPES: Mapping[tuple[ManifestFormat, Compression], str] = {
    ("oci", "gzip"): "application/vnd.oci.image.layer.v1.tar+gzip",
    ("oci", "zstd"): "application/vnd.oci.image.layer.v1.tar+zstd",
    ("oci", "none"): "application/vnd.oci.image.layer.v1.tar",
    ("docker", "gzip"): "application/vnd.docker.image.rootfs.diff.tar.gzip",
}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class Blob:
    """Content on disk with its digest and media type."""

    path: Path
    digest: str
    size: int
    media_type: str

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


@dataclass(frozen=True)
class Layer:
    """A compressed layer blob and the digest of its uncompressed tar (the diff id)."""

    blob: Blob
    diff_id: str
    tar_path: Path


@dataclass
class Image:
    """Layers (base first) plus a runtime config, for one platform."""

    layers: list[Layer]
    config: dict[str, Any]
    architecture: str = "amd64"
    variant: str | None = None
    manifest_format: ManifestFormat = "oci"

    def config_blob(self, workdir: Path) -> Blob:
        document = {
            "architecture": self.architecture,
            "os": "linux",
            "config": self.config,
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in self.layers]},
            "history": [{"created_by": "hydria testbed"} for _ in self.layers],
        }
        if self.variant:
            document["variant"] = self.variant
        media = OCI_CONFIG if self.manifest_format == "oci" else DOCKER_CONFIG
        return _write_blob(workdir, _canonical(document), media)

    def manifest(self, workdir: Path) -> tuple[Blob, list[Blob]]:
        """Write the config and manifest blobs; return the manifest and every blob it needs."""
        config = self.config_blob(workdir)
        media = OCI_MANIFEST if self.manifest_format == "oci" else DOCKER_MANIFEST
        document = {
            "schemaVersion": 2,
            "mediaType": media,
            "config": config.descriptor(),
            "layers": [layer.blob.descriptor() for layer in self.layers],
        }
        manifest = _write_blob(workdir, _canonical(document), media)
        return manifest, [config, *(layer.blob for layer in self.layers)]

    def platform(self) -> dict[str, str]:
        platform = {"architecture": self.architecture, "os": "linux"}
        if self.variant:
            platform["variant"] = self.variant
        return platform


def make_layer(tar_path: Path, workdir: Path, compression: Compression = "gzip",
               manifest_format: ManifestFormat = "oci") -> Layer:
    """Compress an uncompressed layer tar into a blob under ``workdir``."""
    diff_id = sha256_file(tar_path)
    media_type = LAYER_TYPES[(manifest_format, compression)]
    fd, tmp = tempfile.mkstemp(dir=workdir)
    with os.fdopen(fd, "wb") as out, tar_path.open("rb") as src:
        if compression == "gzip":
            with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)
        elif compression == "zstd":
            zstandard.ZstdCompressor(level=3).copy_stream(src, out)
        else:
            shutil.copyfileobj(src, out, 1 << 20)
    blob = _publish(workdir, Path(tmp), media_type)
    return Layer(blob, diff_id, tar_path)


def kept_layer(tar_path: Path, workdir: Path) -> Layer:
    """make_layer (gzip) of a large tar kept in the test bed's cache, for benchmarks: its blob,
    compressed by pigz on every CPU, and the digests are kept beside the tar for the next run, and
    the blob is linked into ``workdir`` (copied where that is another file system)."""
    blob_path = tar_path.with_name(tar_path.name + ".gz")
    digests = tar_path.with_name(tar_path.name + ".digests")
    if not digests.exists() or digests.stat().st_mtime < tar_path.stat().st_mtime:
        partial = tar_path.with_name(tar_path.name + ".gz.partial")
        with tar_path.open("rb") as src, partial.open("wb") as out:
            subprocess.run(["pigz", "-6", "--no-name", "--stdout"], stdin=src, stdout=out, check=True)
        partial.rename(blob_path)
        digests.write_text(f"{sha256_file(tar_path)} {sha256_file(blob_path)}\n")
    diff_id, digest = digests.read_text().split()
    final = workdir / digest.split(":", 1)[1]
    if not final.exists():
        try:
            os.link(blob_path, final)
        except OSError:
            shutil.copyfile(blob_path, final)
    return Layer(Blob(final, digest, final.stat().st_size, LAYER_TYPES[("oci", "gzip")]), diff_id, tar_path)


def _canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _write_blob(workdir: Path, data: bytes, media_type: str) -> Blob:
    fd, tmp = tempfile.mkstemp(dir=workdir)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return _publish(workdir, Path(tmp), media_type)


def _publish(workdir: Path, tmp: Path, media_type: str) -> Blob:
    digest = sha256_file(tmp)
    final = workdir / digest.split(":", 1)[1]
    os.replace(tmp, final)
    return Blob(final, digest, final.stat().st_size, media_type)


def index_blob(workdir: Path, manifests: Sequence[tuple[Blob, dict[str, str]]],
               manifest_format: ManifestFormat = "oci") -> Blob:
    """A multi-platform index (OCI) or manifest list (Docker) over per-platform manifests."""
    media = OCI_INDEX if manifest_format == "oci" else DOCKER_LIST
    document = {
        "schemaVersion": 2,
        "mediaType": media,
        "manifests": [blob.descriptor(platform=platform) for blob, platform in manifests],
    }
    return _write_blob(workdir, _canonical(document), media)


# --- the forms an image is stored in ---------------------------------------------------------

def write_oci_layout(images: Sequence[Image], dest: Path, tag: str, workdir: Path) -> None:
    """An OCI image layout directory; several images become one index entry per platform."""
    blobs_dir = dest / "blobs" / "sha256"
    blobs_dir.mkdir(parents=True, exist_ok=True)
    top, blobs = _top_manifest(images, workdir)
    for blob in [top, *blobs]:
        target = blobs_dir / blob.digest.split(":", 1)[1]
        if not target.exists():
            shutil.copyfile(blob.path, target)
    (dest / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX,
             "manifests": [top.descriptor(annotations={"org.opencontainers.image.ref.name": tag})]}
    (dest / "index.json").write_bytes(_canonical(index))


def _top_manifest(images: Sequence[Image], workdir: Path) -> tuple[Blob, list[Blob]]:
    if len(images) == 1:
        return images[0].manifest(workdir)
    entries, blobs = [], []
    for image in images:
        manifest, needed = image.manifest(workdir)
        entries.append((manifest, image.platform()))
        blobs += [manifest, *needed]
    return index_blob(workdir, entries, images[0].manifest_format), blobs


def write_oci_archive(images: Sequence[Image], dest: Path, tag: str, workdir: Path) -> None:
    """An OCI layout packed in a tar file (``oci-archive:`` in skopeo's terms)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        write_oci_layout(images, Path(tmp), tag, workdir)
        _tar_directory(Path(tmp), dest)


def write_docker_archive(image: Image, dest: Path, repo_tag: str, workdir: Path) -> None:
    """What ``docker save`` writes: manifest.json, the config, one uncompressed tar per layer."""
    config = image.config_blob(workdir)
    config_name = config.digest.split(":", 1)[1] + ".json"
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        shutil.copyfile(config.path, root / config_name)
        layer_names = []
        for layer in image.layers:
            layer_id = layer.diff_id.split(":", 1)[1]
            (root / layer_id).mkdir()
            shutil.copyfile(layer.tar_path, root / layer_id / "layer.tar")
            (root / layer_id / "VERSION").write_text("1.0")
            layer_names.append(f"{layer_id}/layer.tar")
        manifest = [{"Config": config_name, "RepoTags": [repo_tag], "Layers": layer_names}]
        (root / "manifest.json").write_bytes(_canonical(manifest))
        repo, _, tag = repo_tag.rpartition(":")
        top_id = layer_names[-1].split("/", 1)[0]
        (root / "repositories").write_bytes(_canonical({repo: {tag: top_id}}))
        _tar_directory(root, dest)


def _tar_directory(source: Path, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".part")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(source.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(source)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    os.replace(tmp, dest)


def push(images: Sequence[Image], registry: str, repository: str, tag: str, workdir: Path,
         *, client: httpx.Client | None = None) -> str:
    """Push to a plain-HTTP registry with the distribution API; return the top manifest digest."""
    top, blobs = _top_manifest(images, workdir)
    own_client = client is None
    client = client or httpx.Client(base_url=f"http://{registry}", timeout=120)
    try:
        seen = set()
        manifests_last = sorted(blobs, key=lambda b: b.media_type in (OCI_MANIFEST, DOCKER_MANIFEST))
        for blob in manifests_last:
            if blob.digest in seen:
                continue
            seen.add(blob.digest)
            if blob.media_type in (OCI_MANIFEST, DOCKER_MANIFEST):
                _put_manifest(client, repository, blob.digest, blob)
            else:
                _upload_blob(client, repository, blob)
        _put_manifest(client, repository, tag, top)
    finally:
        if own_client:
            client.close()
    return top.digest


def _upload_blob(client: httpx.Client, repository: str, blob: Blob) -> None:
    if client.head(f"/v2/{repository}/blobs/{blob.digest}").status_code == 200:
        return
    with blob.path.open("rb") as f:  # streamed: a benchmark's blobs are gigabytes
        _send(client, repository, blob.digest, iter(lambda: f.read(1 << 20), b""), blob.size)


def upload_data(client: httpx.Client, repository: str, data: bytes) -> str:
    """A small blob (a signature payload, an empty config) into ``repository``; its digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _send(client, repository, digest, data, len(data))
    return digest


def _send(client: httpx.Client, repository: str, digest: str, content: bytes | Iterator[bytes], size: int) -> None:
    start = client.post(f"/v2/{repository}/blobs/uploads/")
    start.raise_for_status()
    location = start.headers["Location"]
    separator = "&" if "?" in location else "?"
    done = client.put(f"{location}{separator}digest={digest}", content=content,
                      headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
    done.raise_for_status()


def _put_manifest(client: httpx.Client, repository: str, reference: str, blob: Blob) -> None:
    response = client.put(f"/v2/{repository}/manifests/{reference}", content=blob.path.read_bytes(),
                          headers={"Content-Type": blob.media_type})
    response.raise_for_status()

