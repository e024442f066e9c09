"""Images on disk: ``oci://DIR`` (an OCI image layout), ``oci-archive://FILE`` (the same in a
tar file) and ``docker-archive://FILE`` (what ``docker save`` and ``podman save`` write).

Nothing is copied into the blob cache: blobs are read where they are, and every blob is checked
against its digest as it is read, because an archive is as untrusted as a registry.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from hydria.errors import HydriaError, InvalidImage, missing_file
from hydria.image.blobs.cache import VerifyingReader, digest_of, hex_of
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import LocalImage
from hydria.paths import open_binary

CONTAINERD_NAME = "io.containerd.image.name"  # the full name, where ref.name is only the tag (docker save)
_MAX_JSON = 16 << 20  # manifests and configs are small; refuse to read a huge "JSON" file


def _not_an_archive(path: Path) -> HydriaError:
    """The error for a file that is no tar archive (plain, gzip, bzip2 or xz), saying what it is
    where that helps."""
    with open_binary(path) as handle:
        head = handle.read(4)
    if head == b"hsqs":
        return InvalidImage(f"{path} is a squashfs image, not an archive",
                            hint=f"it needs no import: hydria start {path} ..., or hydria create {path}")
    what = "an empty file" if not head else "not a tar archive (plain, gzip, bzip2 or xz)"
    return InvalidImage(f"{path}: {what}",
                        hint="docker-archive:// takes 'docker save' output, oci-archive:// an OCI image tar")


class _Files:
    """Read access to the files of a directory or of a tar archive, by relative path."""

    def __init__(self, root: Path, stack: ExitStack, where: str) -> None:
        self.where = where
        self.root = root
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        if not root.is_dir():
            try:
                archive = stack.enter_context(open_binary(root))  # a FIFO given as an archive: refused at once
                self.tar = stack.enter_context(tarfile.open(fileobj=archive))  # noqa: SIM115 closed by the stack
            except OSError as e:
                raise HydriaError(f"cannot read {root}: {e.strerror}") from None
            except tarfile.TarError:
                raise _not_an_archive(root) from None
            self.members = {m.name.removeprefix("./"): m for m in self.tar.getmembers() if m.isreg()}

    def has(self, name: str) -> bool:
        return name in self.members if self.tar else os.path.lexists(self.root / name)  # open says what it is

    @contextmanager
    def open(self, name: str) -> Iterator[mf.Blob]:
        if self.tar is not None:
            member = self.members.get(name)
            handle = self.tar.extractfile(member) if member else None
            if handle is None:
                raise InvalidImage(f"{self.where} lacks {name}")
            yield handle  # type: ignore[misc]  # typeshed says IO; it is an io.BufferedReader
            return
        try:
            handle = open_binary(self.root / name)  # not a FIFO nor a device the layout's author put there
        except FileNotFoundError:
            raise InvalidImage(f"{self.where} lacks {name}") from None
        except OSError as e:
            raise InvalidImage(f"cannot read {self.root / name}: {e.strerror}") from None
        with handle:
            yield handle

    def json(self, name: str, digest: str | None = None) -> Any:
        with self.open(name) as handle:
            data = handle.read(_MAX_JSON)
        if digest and digest_of(data) != digest:
            raise HydriaError(f"Checksum mismatch: {digest} in {self.where}")
        return mf.load_json(data, f"{name} in {self.where}")


def open_local(ref: LocalImage, cwd: Path, stack: ExitStack) -> Callable[[mf.Platform], mf.ResolvedImage]:
    """A resolver for a local image. Raises HydriaError when the path is missing or unusable."""
    path = (cwd / ref.path).resolve()
    if not path.exists():
        raise missing_file(str(path))
    files = _Files(path, stack, str(path))
    if ref.scheme == "docker-archive":
        return lambda want: _docker_archive(files, ref)
    return lambda want: _oci_layout(files, ref, want)


def layout_name(ref: LocalImage, cwd: Path) -> str | None:
    """The name an OCI layout folder gives its only image (its ``ref.name`` annotation, or
    containerd's full name), for the image file's name; None for anything else."""
    if ref.scheme != "oci" or ref.ref is not None:
        return None
    try:
        with open_binary(cwd / ref.path / "index.json") as handle:
            index = json.loads(handle.read(_MAX_JSON))
        manifests = index["manifests"]
        annotations = (manifests[0].get("annotations") or {}) if len(manifests) == 1 else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # the import says what is wrong with it
    name = annotations.get(CONTAINERD_NAME) or annotations.get(mf.REF_ANNOTATION)
    return name if isinstance(name, str) else None


def _blob_name(digest: str) -> str:
    return f"blobs/sha256/{hex_of(digest)}"


def _opener(files: _Files, name_of: Callable[[mf.Descriptor], str]) -> Callable[[mf.Descriptor], Any]:
    @contextmanager
    def open_blob(descriptor: mf.Descriptor) -> Iterator[mf.Blob]:
        with files.open(name_of(descriptor)) as handle:
            yield VerifyingReader(handle, descriptor.digest, files.where)
    return open_blob


def _oci_layout(files: _Files, ref: LocalImage, want: mf.Platform) -> mf.ResolvedImage:
    if not files.has("index.json"):
        raise InvalidImage(f"{files.where} is not an OCI image layout (no index.json)")
    index = files.json("index.json")
    entries = mf.parse_index(index, files.where)
    names = [(m.get("annotations") or {}).get(mf.REF_ANNOTATION) for m in index["manifests"]]
    if ref.ref is not None:
        chosen = [e for e, name in zip(entries, names) if name == ref.ref]  # one entry per manifest
        if not chosen:
            raise HydriaError(f"no image named {ref.ref!r} in {files.where}",
                              hint="available: " + ", ".join(n for n in names if n) or "none named")
        entry = chosen[0]
    elif len(entries) == 1:
        entry = entries[0]
    elif any(e.platform for e in entries):
        entry = mf.choose_platform(entries, want, files.where)
    else:
        raise HydriaError(f"{files.where} holds {len(entries)} images; name one with :REF",
                          hint="available: " + ", ".join(n for n in names if n))
    document = files.json(_blob_name(entry.digest), entry.digest)
    media_type = mf.media_type_of(document, entry.media_type)
    if media_type in mf.INDEX_TYPES:
        entry = mf.choose_platform(mf.parse_index(document, files.where), want, files.where)
        document = files.json(_blob_name(entry.digest), entry.digest)
        media_type = mf.media_type_of(document, entry.media_type)
    manifest = mf.parse_manifest(document, media_type, files.where)
    config = mf.check_config(files.json(_blob_name(manifest.config.digest), manifest.config.digest),
                             f"the image config in {files.where}")
    return mf.ResolvedImage(ref.uri, config, manifest.layers, _opener(files, lambda d: _blob_name(d.digest)))


def _docker_archive(files: _Files, ref: LocalImage) -> mf.ResolvedImage:
    """``docker save`` output: manifest.json names the config and one tar per layer. Layers are
    identified by the digest of their uncompressed tar (the config's diff_ids)."""
    if not files.has("manifest.json"):
        raise InvalidImage(f"{files.where} is not a docker archive (no manifest.json)")
    entries = files.json("manifest.json")
    if not isinstance(entries, list) or not entries:
        raise InvalidImage(f"{files.where}: manifest.json lists no image")
    if len(entries) > 1:
        raise HydriaError(f"{files.where} holds {len(entries)} images; hydria imports archives of one image",
                          hint="save one image per archive: docker save IMAGE -o FILE")
    entry = entries[0]
    try:
        config_name, layer_names = str(entry["Config"]), [str(n) for n in entry["Layers"]]
    except (KeyError, TypeError):
        raise InvalidImage(f"{files.where}: malformed manifest.json") from None
    config = mf.check_config(files.json(config_name), f"{config_name} in {files.where}")
    rootfs = config.get("rootfs")
    diff_ids = (rootfs.get("diff_ids") if isinstance(rootfs, dict) else None) or []
    if not isinstance(diff_ids, list):
        raise InvalidImage(f"{files.where}: the config's rootfs.diff_ids is not a list")
    if len(diff_ids) != len(layer_names):
        raise HydriaError(f"Could not parse digest information from {files.where}: "
                          f"{len(layer_names)} layers but {len(diff_ids)} diff_ids")
    layers = []
    for name, diff_id in zip(layer_names, diff_ids):  # as many, checked above
        # Newer Docker writes OCI blobs (named by their own digest, possibly compressed).
        digest = "sha256:" + name.rsplit("/", 1)[1] if name.startswith("blobs/sha256/") else str(diff_id)
        layers.append(mf.Descriptor(digest, -1, "", None))
    by_digest = {d.digest: n for d, n in zip(layers, layer_names)}
    return mf.ResolvedImage(ref.uri, config, tuple(layers), _opener(files, lambda d: by_digest[d.digest]))
