"""The referrers index of an image (OCI 1.1), as a registry or a hostile one serves it: only
cosign's signature artifacts are taken, and an index that is none, or lists too many signatures,
is one clear error."""

from __future__ import annotations

import pytest

from hydria.image.trust.signatures import (
    MAX_SIGNATURES,
    SIGNATURE_ARTIFACT,
    SignatureError,
    referrers_tag,
    signature_referrers,
)

DIGEST = "sha256:" + "c" * 64


def entry(artifact_type: object, digest: object = DIGEST) -> dict[str, object]:
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": 10,
            "artifactType": artifact_type}


def test_only_signatures_are_taken() -> None:
    index = {"manifests": [entry("application/spdx+json", "sha256:" + "a" * 64), entry(SIGNATURE_ARTIFACT),
                           "junk", entry(None, "sha256:" + "b" * 64)]}
    assert signature_referrers(index, "w") == [DIGEST]


def test_the_referrers_tag_is_the_digest_with_a_dash() -> None:
    assert referrers_tag(DIGEST) == "sha256-" + "c" * 64


@pytest.mark.parametrize(("document", "said"), [
    (None, "is not an index of referrers"),
    ([], "is not an index of referrers"),
    ({"manifests": {"a": 1}}, "is not an index of referrers"),
    ({"manifests": [entry(SIGNATURE_ARTIFACT, 7)]}, "a signature referrer without a sha256 digest"),
    ({"manifests": [entry(SIGNATURE_ARTIFACT, "md5:00")]}, "a signature referrer without a sha256 digest"),
    ({"manifests": [entry(SIGNATURE_ARTIFACT, "sha256:../../blobs/x")]}, "a signature referrer without a sha256"),
    ({"manifests": [entry(SIGNATURE_ARTIFACT)] * (MAX_SIGNATURES + 1)}, f"more than {MAX_SIGNATURES}"),
])
def test_what_is_no_index_of_signatures_is_said(document: object, said: str) -> None:
    with pytest.raises(SignatureError, match=said):
        signature_referrers(document, "the referrers of r/a@sha256:x")
