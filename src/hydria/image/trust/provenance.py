"""Where an image came from, as the image records it, and that record checked again (``hydria
verify``).

An imported image's ``/etc/rc`` begins with its provenance (image/ref/runtime_files.py): the
reference it was imported from (``# hydria-provenance: URI``; enroot writes
``# enroot-provenance: URI``) and, for a registry's image, the digest of its manifest
(``# hydria-digest: sha256:...``), which pins its config and every layer. :func:`verify` asks the
registry for that digest's cosign signatures now and checks them against the site's policy, or
against a key the user names, as an import does (image/trust/policy.py). What it says holds for the
image's content as far as the file is the one hydria wrote: the image store's and the cache's
cannot be changed by their users, a user's own file can (docs/security.md).
"""

from __future__ import annotations

import os
import subprocess
from contextlib import ExitStack

from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.image.blobs.cache import is_digest
from hydria.image.ref import manifest as mf
from hydria.image.ref.reference import RegistryImage, parse
from hydria.image.ref.runtime_files import DIGEST, PROVENANCE
from hydria.image.trust import policy
from hydria.image.trust.signatures import key_problem
from hydria.log import Logger
from hydria.paths import open_regular, read_text
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime.layered import LayeredImageError, is_layered, layer_paths

if TYPE_CHECKING:
    from hydria.runtime.rootfs import Container

ENROOT_PROVENANCE = "# enroot-provenance:"
RC_HEAD = 1 << 16  # the provenance is the first lines: no more of /etc/rc is read

log = Logger(__name__)


class NoProvenance(HydriaError):
    """An image that records no reference or no manifest digest, or whose record cannot be read."""


class Provenance(Record):
    uri: str
    digest: str | None  # None: an image of a local source, or one enroot or an older hydria imported


class Verified(Record):
    provenance: Provenance
    rule: str  # the rule that was checked, as the policy file names it and where that file is, or the --key
    passed: str  # what passed ("signed by the key of ... as ..."); empty: the rule asks no signature


def parse_rc(text: str, image: str) -> Provenance:
    """The provenance that an ``/etc/rc`` (its first lines) records. Raises NoProvenance."""
    lines = text.splitlines()
    first = lines[0] if lines else ""
    for prefix in (PROVENANCE, ENROOT_PROVENANCE):
        if first.startswith(prefix + " "):
            uri = first[len(prefix) + 1:].strip()
            break
    else:
        raise NoProvenance(f"{image} records no provenance: its /etc/rc does not begin with "
                           f"'{PROVENANCE} URI'", hint="it was not imported by hydria or enroot (built, "
                           "exported or made by hand): import it from its registry to have one")
    digest = None
    if len(lines) > 1 and lines[1].startswith(DIGEST + " "):
        digest = lines[1][len(DIGEST) + 1:].strip()
        if not is_digest(digest):
            raise NoProvenance(f"{image} records a manifest digest that is none: {digest[:80]!r}",
                               hint="the image was changed or crafted: import it again from its registry")
    return Provenance(uri, digest)


def recorded(image: str) -> Provenance:
    """The provenance that the image file ``image`` (one squashfs, or a layered image: its top
    layer holds the runtime files) records. Raises NoProvenance."""
    try:
        with open(open_regular(image), "rb") as handle:
            head = handle.read(64)
        top = layer_paths(image)[-1] if is_layered(head) else image
        return parse_rc(_rc_head(top, image), image)
    except (OSError, LayeredImageError) as e:
        said = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise NoProvenance(f"cannot read the image {image}: {said}",
                           hint="name an image file (.sqsh, or a layered image) or a container") from None


def recorded_in_tree(root: str, name: str) -> Provenance:
    """The provenance that the root file system ``root`` (an unpacked container, ``name``)
    records. Raises NoProvenance."""
    try:
        with open(open_regular(os.path.join(root, "etc", "rc")), "rb") as handle:
            text = handle.read(RC_HEAD)
    except OSError as e:
        raise NoProvenance(f"cannot read /etc/rc of {name}: {e.strerror}",
                           hint="the container's root file system lacks the image's runtime files") from None
    return parse_rc(text.decode("utf-8", "replace"), name)


def recorded_of(container: Container, name: str) -> Provenance:
    """The provenance that the container ``name`` records: its image file's (:func:`recorded`),
    or its unpacked tree's (:func:`recorded_in_tree`). Raises NoProvenance."""
    if container.image is not None:
        return recorded(container.image)
    assert container.directory is not None
    return recorded_in_tree(container.directory, name)


def _rc_head(squashfs: str, image: str) -> str:
    """The first RC_HEAD bytes of ``/etc/rc`` in the squashfs file ``squashfs``, read by sqfscat
    (squashfs-tools-ng, which reads every compressor hydria writes) from a descriptor that was
    checked to be a regular file: neither a FIFO nor a swapped path can hold it up."""
    fd = open_regular(squashfs)
    try:
        try:
            reader = subprocess.Popen(["sqfscat", f"/proc/self/fd/{fd}", "etc/rc"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(fd,))
        except FileNotFoundError:
            raise HydriaError("sqfscat is not installed", hint="install squashfs-tools-ng") from None
        assert reader.stdout is not None and reader.stderr is not None
        text = reader.stdout.read(RC_HEAD)
        reader.kill()
        said = reader.stderr.read(4096).decode(errors="replace").strip()
        if reader.wait() > 0 or (not text and said):
            raise NoProvenance(f"{image} holds no /etc/rc that can be read: {said.splitlines()[-1] if said else ''}",
                               hint="it is no image that hydria or enroot imported: import it again")
        return text.decode("utf-8", "replace")
    finally:
        os.close(fd)


def verify(provenance: Provenance, image: str, settings: Settings, key_path: str | None = None) -> Verified:
    """Check the signatures the registry holds now for the image's manifest digest against the
    site's policy, or against the PEM public key ``key_path`` (as cosign verify --key). Raises
    ImageRefused when the requirement is not met, NoProvenance without a digest, HydriaError."""
    from hydria.image.importer import blob_cache
    from hydria.image.progress import Progress
    from hydria.image.sources.registry import RegistrySource
    from hydria.image.sources.registryhttp import RegistryError

    ref = parse(provenance.uri)
    if not isinstance(ref, RegistryImage):
        raise NoProvenance(f"{image} came from {provenance.uri}, not from a registry: only a registry's images "
                           "carry signatures", hint="import it from a registry to verify it")
    if provenance.digest is None:
        raise NoProvenance(f"{image} records no manifest digest (imported by enroot or an older hydria)",
                           hint=f"import it again: hydria import {provenance.uri}")
    rule = _key_rule(key_path) if key_path else policy.check(ref, settings)
    if rule is None:
        return Verified(provenance, "", "")
    with ExitStack() as stack:
        source = RegistrySource(ref, settings, blob_cache(settings), Progress(live=False))
        stack.callback(source.close)
        digests = {provenance.digest}
        try:
            if rule.signed and source.digest(mf.parse_platform(None)) == provenance.digest:
                digests.add(source.tag_digest())  # the index that holds it, which cosign may have signed
        except RegistryError as e:  # the tag is gone: the manifest's own signatures still count
            log.info("Not checking the index of %s: %s", provenance.uri, e.message)
        passed = policy.check_signed(rule, ref, digests, policy.signature_finders(source))
    return Verified(provenance, rule.where if key_path else f"{rule.where} in {policy.policy_file(settings)}", passed)


def _key_rule(key_path: str) -> policy.Rule:
    try:
        key = read_text(key_path).encode()
    except OSError as e:
        raise HydriaError(f"cannot read the key {key_path}: {e.strerror}", hint="name a PEM public key file") from None
    problem = key_problem(key)
    if problem:
        raise HydriaError(f"the key {key_path} {problem}", hint="name the public key (cosign.pub), not the private one")
    return policy.Rule(f"--key {key_path}", (policy.Requirement(policy.SIGNED, key, key_path),), "hydria verify")
