"""A built image written out: as a squashfs image file (hydria's own import pipeline: the layers
merged and squashed, the runtime files from the config), or as an OCI image layout (the layers as
they are, a config and a manifest), which ``hydria import oci://DIR``, podman and skopeo read.

With ``HYDRIA_LAYERED_IMAGES`` (the default), ``-t NAME`` writes a layered image instead, whose
layer images (imagebuild/layer_folder.py) the images built into the same folder share.

Outputs replace an earlier build's (as ``docker build -t`` moves a tag), but only once complete:
an interrupted build leaves the earlier file or layout as it was.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.image.blobs.cache import digest_of, hex_of
from hydria.image.push import PushBlob, PushImage
from hydria.image.ref import manifest as mf
from hydria.imagebuild.cache import BuildCache, key_of
from hydria.imagebuild.layer_folder import publish_layered
from hydria.imagebuild.state import StageImage, now
from hydria.log import Logger
from hydria.partial import partial_path

log = Logger(__name__)


def image_config(image: StageImage) -> dict[str, Any]:
    """The OCI image config of a built stage."""
    config: dict[str, Any] = {
        "created": now(),
        "architecture": image.platform.architecture,
        "os": image.platform.os,
        "config": {k: v for k, v in image.config.items() if v is not None},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in image.layers]},
        "history": image.history,
    }
    if image.platform.variant:
        config["variant"] = image.platform.variant
    if image.author:
        config["author"] = image.author
    return config


def _json(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def manifest_of(config: bytes, layers: list[mf.Descriptor]) -> bytes:
    return _json({
        "schemaVersion": 2,
        "mediaType": mf.OCI_MANIFEST,
        "config": {"mediaType": mf.OCI_CONFIG, "digest": digest_of(config), "size": len(config)},
        "layers": [{"mediaType": d.media_type, "digest": d.digest, "size": d.size} for d in layers],
    })


def opener(image: StageImage, cache: BuildCache) -> Any:
    """How to read a layer: this build's from the build cache, the base image's as its source does."""

    @contextmanager
    def open_blob(descriptor: mf.Descriptor) -> Iterator[mf.Blob]:
        path = cache.blob(descriptor.digest)
        if path.is_file():
            with open(path, "rb") as handle:
                yield handle
            return
        if image.open_base_blob is None:
            raise HydriaError(f"layer {descriptor.digest} is gone from the build cache",
                              hint="build again (hydria build --no-cache)")
        with image.open_base_blob(descriptor) as blob:
            yield blob

    return open_blob


def write_squashfs(image: StageImage, cache: BuildCache, target: Path, uri: str, settings: Settings) -> None:
    """The image as a squashfs file at ``target``, replacing one that is there. The build cache
    keeps it (``outputs/KEY.sqsh``, by its layers, the config fields that make its runtime files
    and the squash options), so an unchanged rebuild links it again instead of squashing again."""
    from hydria.anonfile import link_or_copy
    from hydria.image.importer import OutputExists, write_image
    from hydria.image.squash.squashfs import squash_plan

    config = image_config(image)
    key = key_of([layer.diff_id for layer in image.layers], config["config"], settings.squash_options, uri)
    kept = cache.output(key)
    if kept.is_file():
        os.utime(kept)  # used now, for hydria cache prune
    else:
        resolved = mf.ResolvedImage(uri, config, tuple(layer.descriptor for layer in image.layers),
                                    opener(image, cache))
        try:
            write_image(resolved, kept, squash_plan(settings.squash_options, settings.max_processors))
        except OutputExists:
            pass  # another build of the same image made it first
    partial = partial_path(target)
    try:
        link_or_copy(kept, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_layered(image: StageImage, cache: BuildCache, target: Path, uri: str, settings: Settings) -> bool:
    """The image as a layered image at ``target`` (replacing one that is there), where layered
    images are on (``HYDRIA_LAYERED_IMAGES``): each layer squashed once into the image cache,
    where the base image's layers are already (the build's steps ran on them), and linked into
    the folder ``LAYER_FOLDER`` beside ``target``, which every layered output of that folder
    shares. A rebuild squashes its changed steps' layers only. False (nothing written) where
    layered images are off or a layer cannot stand alone: the caller writes one squashfs file."""
    from hydria.image.importer import layered_entry, make_layered
    from hydria.image.squash.layer_image import LayerNeedsMerge

    config = image_config(image)
    key = key_of([layer.diff_id for layer in image.layers], config["config"], uri)
    kept = layered_entry(uri, f"sha256:{key}", image.platform, settings)
    if kept is None:
        return False
    resolved = mf.ResolvedImage(uri, config, tuple(layer.descriptor for layer in image.layers),
                                opener(image, cache))
    try:
        entry = kept.find() or make_layered(resolved, kept, settings)
    except LayerNeedsMerge as e:
        log.info("Writing the image as one file: %s", e.message)
        return False
    publish_layered(entry, target)
    return True


def write_oci_layout(image: StageImage, cache: BuildCache, folder: Path, reference: str) -> str:
    """The image as an OCI image layout in ``folder`` (made, or replaced where it holds one);
    returns the manifest's digest."""
    if folder.exists() and not (folder / "oci-layout").is_file() and any(folder.iterdir()):
        raise HydriaError(f"--oci {folder}: the folder holds something other than an OCI image layout",
                          hint="give a new or empty folder")
    partial = partial_path(folder)
    blobs = partial / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    try:
        open_blob = opener(image, cache)
        for layer in image.layers:
            with open_blob(layer.descriptor) as blob, open(blobs / hex_of(layer.descriptor.digest), "wb") as out:
                shutil.copyfileobj(blob, out, 1 << 20)
        config = _json(image_config(image))
        manifest = manifest_of(config, [layer.descriptor for layer in image.layers])
        (blobs / hex_of(digest_of(config))).write_bytes(config)
        (blobs / hex_of(digest_of(manifest))).write_bytes(manifest)
        (partial / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        index = {"schemaVersion": 2, "mediaType": mf.OCI_INDEX,
                 "manifests": [{"mediaType": mf.OCI_MANIFEST, "digest": digest_of(manifest), "size": len(manifest),
                                "annotations": {mf.REF_ANNOTATION: reference}}]}
        (partial / "index.json").write_bytes(_json(index))
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(partial, folder)
    finally:
        if partial.exists():
            shutil.rmtree(partial)
    return digest_of(manifest)


def build_record(image: StageImage, name: str) -> dict[str, Any]:
    """What a push needs of a built image: its config, its layers and where they came from."""
    return {"name": name, "config": image_config(image),
            "layers": [{"digest": layer.descriptor.digest, "size": layer.descriptor.size,
                        "media_type": layer.descriptor.media_type, "origin": layer.origin}
                       for layer in image.layers]}


def record_name(image: StageImage, cache: BuildCache, name: str) -> None:
    """Remember the image built as ``-t NAME``, for ``hydria push NAME``."""
    record = build_record(image, name)
    path = cache.named_image(name)
    partial = partial_path(path)
    try:
        partial.write_bytes(_json(record))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def named(cache: BuildCache, name: str) -> dict[str, Any] | None:
    """What :func:`record_name` remembered of ``name``."""
    path = cache.named_image(name)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("name") == name else None


def push_image(record: dict[str, Any], cache: BuildCache, settings: Settings, registry: str) -> PushImage:
    """A built image to push: this build's layers from the build cache, the base image's from
    the blob cache (fetched again from their registry where it no longer has them; mounted from
    their repository where it is on the ``registry`` pushed to)."""
    from hydria.image.importer import blob_cache
    from hydria.image.ref.reference import RegistryImage, parse

    blobs = blob_cache(settings)
    config = _json(record["config"])
    layers = [mf.Descriptor(str(entry["digest"]), int(entry["size"]), str(entry["media_type"]))
              for entry in record["layers"]]
    origins = {str(entry["digest"]): entry.get("origin") for entry in record["layers"]}

    def opener(descriptor: mf.Descriptor) -> Any:
        @contextmanager
        def open_blob() -> Iterator[mf.Blob]:
            path = cache.blob(descriptor.digest)
            if path.is_file():
                with open(path, "rb") as handle:
                    yield handle
                return
            found = blobs.lookup(descriptor.digest)
            if found is None and origins.get(descriptor.digest):
                from hydria.image.sources.registry import RegistrySource

                origin = parse(str(origins[descriptor.digest]))
                assert isinstance(origin, RegistryImage)
                source = RegistrySource(origin, settings, blobs)
                try:
                    source.fetch([descriptor])
                finally:
                    source.close()
                found = blobs.lookup(descriptor.digest)
            if found is None:
                raise HydriaError(f"layer {descriptor.digest} is in neither cache",
                                  hint="build the image again, then push it")
            with blobs.reading(found, descriptor.digest) as blob:
                yield blob

        return open_blob

    def mount_from(digest: str) -> str | None:
        origin = origins.get(digest)
        ref = parse(str(origin)) if origin else None
        return ref.repository if isinstance(ref, RegistryImage) and ref.registry == registry else None

    config_descriptor = mf.Descriptor(digest_of(config), len(config), mf.OCI_CONFIG)

    @contextmanager
    def open_config() -> Iterator[mf.Blob]:
        yield io.BytesIO(config)

    return PushImage(manifest_of(config, layers), (*(PushBlob(d, opener(d), mount_from(d.digest)) for d in layers),
                                PushBlob(config_descriptor, open_config)))
