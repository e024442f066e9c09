"""``hydria verify [--key KEY.pub] [--json] IMAGE``: where an image file or a container's image
came from, as it records it, and its signatures checked now against the site's policy or a key
(image/trust/provenance.py); ``--recorded`` says the record alone, asking no registry."""

from __future__ import annotations

import argparse

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", metavar="KEY.pub", help="check for a signature by this PEM public key (as "
                        "cosign verify --key) instead of the site's policy")
    parser.add_argument("--recorded", action="store_true",
                        help="only say what the image records (its reference and manifest digest); ask no registry")
    parser.add_argument("--json", action="store_true",
                        help="print {image, reference, digest, rule, signed} as JSON")
    parser.add_argument("image", metavar="IMAGE", help="an image file (.sqsh or a layered image) or a container's name")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.container.target import resolve_target
    from hydria.image.trust import provenance

    recorded = provenance.recorded_of(resolve_target(options.image, settings), options.image)
    answer: dict[str, str | None] = {"image": options.image, "reference": recorded.uri, "digest": recorded.digest}
    if not options.recorded:
        verified = provenance.verify(recorded, options.image, settings, options.key)
        answer |= {"rule": verified.rule or None, "signed": verified.passed or None}
    if options.json:
        import json

        print(json.dumps(answer, indent=1))
        return 0
    print(f"Image: {options.image}")
    print(f"Reference: {recorded.uri}")
    print(f"Manifest digest: {recorded.digest or '(none recorded)'}")
    if not options.recorded:
        print(f"Rule: {answer['rule'] or 'none: the site has no image policy (docs/security.md)'}")
        print(f"Signed: {answer['signed'] or 'no signature asked'}")
    return 0
