"""``hydria push SOURCE docker://[USER@][REGISTRY#]REPOSITORY[:TAG]``: an image into a registry,
with your credentials (docs/build.md). SOURCE: the name of an image you built (``hydria build
-t NAME``), or an OCI image layout (``--oci`` of hydria build, ``oci://DIR[:NAME]``)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from hydria.config import Settings
from hydria.errors import InvalidArgument

if TYPE_CHECKING:
    from hydria.image.push import PushImage
    from hydria.image.ref.reference import RegistryImage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="NAME (hydria build -t NAME), or oci://DIR[:NAME]")
    parser.add_argument("destination", metavar="URI", help="docker://[USER@][REGISTRY#]REPOSITORY[:TAG]")
    parser.add_argument("--sign", metavar="KEY.pem",
                        help="also push a cosign signature by this PEM private key (a site policy's sigstoreSigned)")


def destination_of(uri: str) -> RegistryImage:
    """Where a push goes: a registry image named by a tag. Raises InvalidArgument."""
    from hydria.image.ref.reference import RegistryImage, parse

    ref = parse(uri)
    if not isinstance(ref, RegistryImage) or ref.digest is not None:
        raise InvalidArgument(uri, hint="push to a registry, by tag: docker://[USER@][REGISTRY#]REPOSITORY[:TAG]")
    return ref


def push_to(image: PushImage, ref: RegistryImage, settings: Settings, sign: str | None = None) -> None:
    """Push and say what was sent (also for hydria build --push); with ``sign``, the PEM private
    key to sign the pushed manifest with (read before anything is sent)."""
    from hydria.image.push import push, push_signature
    from hydria.image.trust import signatures
    from hydria.log import Logger

    key = signatures.private_key(sign) if sign else None
    log = Logger("hydria")
    pushed = push(image, ref, settings, lambda line: log.info("%s", line))
    log.info("Pushed %s (%s): %d blob(s) sent, %d already there", ref.uri, pushed.digest, pushed.sent, pushed.skipped)
    if key is not None:
        push_signature(ref, settings, pushed.digest, *signatures.sign(key, pushed.digest, ref.exact_name))
        log.info("Signed %s as %s (%s)", pushed.digest, ref.exact_name, signatures.signature_tag(pushed.digest))


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.image.push import from_oci_layout
    from hydria.imagebuild import output
    from hydria.imagebuild.cache import BuildCache

    source: str = options.source
    destination = destination_of(options.destination)
    if source.startswith("oci://"):
        folder, _, name = source[len("oci://"):].partition(":")
        image = from_oci_layout(folder, name or None)
    elif os.path.isfile(os.path.join(source, "oci-layout")):
        image = from_oci_layout(source, None)
    else:
        cache = BuildCache(settings.cache_path, settings.build_subordinate_ids)
        record = output.named(cache, source)
        if record is None:
            raise InvalidArgument(source, hint="push an image you built with hydria build -t NAME, or an OCI "
                                               "image layout (oci://DIR)")
        image = output.push_image(record, cache, settings, destination.registry)
    push_to(image, destination, settings, options.sign)
    return 0
